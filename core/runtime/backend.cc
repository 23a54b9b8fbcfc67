#include "core/runtime/backend.h"

#include <fmt/format.h>

#include "core/common/error.h"

namespace fullshard {

OutOfMemoryError::OutOfMemoryError(uint64_t requested, MemCategory cat, std::string what,
                                   MemorySnapshot snap, uint64_t capacity)
    : std::runtime_error(fmt::format("out of memory allocating {} bytes for {} ({}); {} bytes "
                                     "allocated, {} reserved of {} capacity",
                                     requested, what, category_key(cat), snap.allocated_bytes,
                                     snap.reserved_bytes, capacity)),
      requested_bytes(requested),
      category(cat),
      what_for(std::move(what)),
      at_failure(snap),
      capacity_bytes(capacity) {}

Backend::Backend(int rank, int world_size, AllocatorOptions allocator,
                 std::unique_ptr<SegmentSource> source, bool record_timeline)
    : rank_(rank),
      world_size_(world_size),
      source_(std::move(source)),
      memory_(allocator, source_.get(), record_timeline) {}

Backend::~Backend() = default;

Buffer Backend::allocate(uint64_t bytes, MemCategory category, StreamRole stream,
                         std::string_view what) {
  auto seq = next_host_seq();
  auto buf = memory_.allocate(bytes, category, stream_id(stream), seq);
  if (!buf) {
    out_of_memory_ = true;
    throw OutOfMemoryError(bytes, category, std::string(what), memory_.current(),
                           memory_.capacity_bytes());
  }
  if (track_moe_) {  // NOTE [MoE memory at the peak]
    if (const auto part = moe_part(category, what)) {
      moe_live_[static_cast<int>(*part)] += buf->block.size;
      moe_buffers_.emplace(buf->id, std::make_pair(*part, buf->block.size));
    }
    if (memory_.at_peak_allocated().host_seq == seq) moe_at_peak_ = moe_live_;
  }
  device_->on_allocate(*buf, stream, what);
  if (observer_) observer_(*buf, true, what);
  return *buf;
}

Buffer Backend::allocate_host(uint64_t bytes, MemCategory category, std::string_view what) {
  auto buf = memory_.allocate_host(bytes, category, next_host_seq());
  device_->on_allocate(buf, StreamRole::kDefault, what);
  if (observer_) observer_(buf, true, what);
  return buf;
}

void Backend::free(const Buffer& buffer) {
  if (!buffer || out_of_memory_) return;
  memory_.free(buffer, next_host_seq());
  if (track_moe_) {
    const auto it = moe_buffers_.find(buffer.id);
    if (it != moe_buffers_.end()) {
      moe_live_[static_cast<int>(it->second.first)] -= it->second.second;
      moe_buffers_.erase(it);
    }
  }
  device_->on_free(buffer);
  if (observer_) observer_(buffer, false, {});
}

// NOTE [cuBLAS workspaces]: PyTorch gives cuBLAS a workspace from its caching allocator for each
// (cuBLAS handle, stream) pair, taken at the pair's first cuBLAS call and kept until the process
// ends (aten/src/ATen/cuda/CublasHandlePool.cpp; the size is CUBLAS_WORKSPACE_CONFIG's total:
// hardware.blas_workspace_bytes). Handles are per thread, and autograd runs a CUDA backward
// (recomputation included) on its own per-device thread: a training step holds two workspaces on
// the compute stream, the forward's and the backward's. torch.cuda.memory_allocated counts both, so
// the simulator does too: the first GEMM a (host thread, stream) pair launches allocates
// blas_workspace_bytes right before the launch, after the GEMM's output (as at::mm allocates its
// result, then asks for the handle), and nothing frees it. Real backends hand that buffer to their
// GEMM library. Not modelled, each version-dependent (docs/hardware.md, "cuBLAS workspaces by
// PyTorch version"): cuBLASLt's own workspace, single-threaded backward, CUDA-graph trees, later
// releases that stop keeping them; set hardware.blas_workspace_bytes for such runs (0: none).
void Backend::launch(StreamRole stream, const OpCall& op) {
  if (blas_workspace_bytes_ > 0 && op_uses_blas(op.kind)) {
    Buffer& ws = blas_workspaces_[static_cast<size_t>(host_thread_)][static_cast<size_t>(stream)];
    if (!ws)
      ws = allocate(blas_workspace_bytes_, MemCategory::kWorkspace, stream,
                    host_thread_ == HostThread::kMain ? "cuBLAS workspace (main thread)"
                                                      : "cuBLAS workspace (autograd thread)");
  }
  next_host_seq();
  if (record_launches_) launched_ops_.push_back({host_seq_, op.kind, op.name, op.flops, op.bytes});
  launched_flops_ += op.flops;
  device_->launch(stream, op);
}

int Backend::blas_workspace_count() const {
  int n = 0;
  for (const auto& per_thread : blas_workspaces_)
    for (const Buffer& b : per_thread) n += b ? 1 : 0;
  return n;
}

void Backend::collective(StreamRole stream, const CollectiveCall& call, const ProcessGroup& group) {
  next_host_seq();
  ++collective_counts_[static_cast<size_t>(call.kind)];
  communicator_->collective(stream, call, group);
}

EventId Backend::record_event(StreamRole stream) {
  next_host_seq();
  return device_->record_event(stream);
}

void Backend::wait_event(StreamRole stream, EventId event) {
  if (event == 0) return;
  next_host_seq();
  device_->wait_event(stream, event);
}

void Backend::synchronize(EventId event) {
  if (event != 0) next_host_seq();
  device_->synchronize(event);
}

void Backend::annotate(std::string_view label) {
  next_host_seq();
  device_->annotate(label);
}

void Backend::fsdp_hook(std::string_view what, int params) {
  next_host_seq();
  device_->fsdp_hook(what, params);
}

}  // namespace fullshard
