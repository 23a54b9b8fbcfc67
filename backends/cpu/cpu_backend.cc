#include "backends/cpu/cpu_backend.h"

#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/gloo/rendezvous.h"
#include "core/common/error.h"
#include "core/data/param_init.h"

namespace fullshard::cpu {

CpuBackend::CpuBackend(CpuBackendOptions options)
    : Backend(options.rank, options.world_size, options.allocator,
              std::make_unique<HostSegmentSource>(), options.record_timeline),
      options_(std::move(options)) {
  for (StreamRole r : kAllStreams)
    streams_.push_back(std::make_unique<StreamWorker>(std::string(stream_name(r)), failure_));
  static_cast<HostSegmentSource*>(segment_source())->before_unmap = [this] {
    for (auto& s : streams_) s->drain();
  };
}

CpuBackend::~CpuBackend() {
  for (auto& s : streams_) s->drain();
  release_host_buffers(true);
  // The allocator (in Backend) releases its segments after this destructor: nothing to drain.
  static_cast<HostSegmentSource*>(segment_source())->before_unmap = nullptr;
  streams_.clear();  // joins the workers
  groups_.clear();
}

void CpuBackend::check_failed() const {
  if (failure_.failed()) std::rethrow_exception(failure_.error());
}

uint8_t* CpuBackend::resolve(const TensorRef& ref) const {
  if (ref.buffer_id == 0) return nullptr;
  auto it = addresses_.find(ref.buffer_id);
  FULLSHARD_CHECK(it != addresses_.end(),
                  fmt::format("tensor of freed buffer {} used", ref.buffer_id));
  return it->second + ref.offset_bytes;
}

void CpuBackend::copy_to_host(const TensorRef& ref, void* dst) {
  synchronize_device();
  const uint8_t* p = resolve(ref);
  if (ref.nbytes() > 0) std::memcpy(dst, p, ref.nbytes());
}

void CpuBackend::copy_from_host(const TensorRef& ref, const void* src) {
  synchronize_device();
  if (ref.nbytes() > 0) std::memcpy(resolve(ref), src, ref.nbytes());
}

double CpuBackend::clock_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - created_).count();
}

void CpuBackend::run_timed(StreamRole r, uint64_t seq, bool starts, const std::function<void()>& fn,
                           const std::string* group) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  auto t1 = std::chrono::steady_clock::now();
  const double start = std::chrono::duration<double>(t0 - created_).count();
  const double end = std::chrono::duration<double>(t1 - created_).count();
  std::lock_guard<std::mutex> lock(intervals_mu_);
  intervals_[static_cast<size_t>(r)].emplace_back(start, end);
  if (group) collective_intervals_.push_back({*group, r, start, end});
  if (starts) work_starts_.emplace_back(seq, start);
  if (!group) kernel_times_.push_back({seq, start, end});
}

std::vector<KernelTime> CpuBackend::take_kernel_times() {
  std::lock_guard<std::mutex> lock(intervals_mu_);
  return std::exchange(kernel_times_, {});
}

std::vector<CollectiveInterval> CpuBackend::take_collective_intervals() {
  std::lock_guard<std::mutex> lock(intervals_mu_);
  return std::exchange(collective_intervals_, {});
}

std::vector<std::pair<uint64_t, double>> CpuBackend::take_work_starts() {
  std::lock_guard<std::mutex> lock(intervals_mu_);
  return std::exchange(work_starts_, {});
}

std::optional<StreamIntervals> CpuBackend::take_busy_intervals() {
  std::lock_guard<std::mutex> lock(intervals_mu_);
  return std::exchange(intervals_, {});
}

void CpuBackend::on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) {
  uint8_t* p = nullptr;
  if (buffer.on_host) {
    release_host_buffers(false);
    p = static_cast<uint8_t*>(
        std::aligned_alloc(64, std::max<uint64_t>(64, (buffer.bytes + 63) / 64 * 64)));
    FULLSHARD_CHECK(p != nullptr,
                    fmt::format("host allocation of {} bytes for {} failed", buffer.bytes, what));
  } else {
    p = reinterpret_cast<uint8_t*>(buffer.block.address);
  }
  addresses_[buffer.id] = p;
}

void CpuBackend::on_free(const Buffer& buffer) {
  auto it = addresses_.find(buffer.id);
  if (it == addresses_.end()) return;
  if (buffer.on_host) {
    DeferredHostFree d{it->second, {}};
    for (size_t i = 0; i < streams_.size(); ++i) {
      d.fences[i] = std::make_shared<CpuEvent>();
      streams_[i]->record(d.fences[i]);
    }
    deferred_host_frees_.push_back(std::move(d));
  }
  addresses_.erase(it);
}

void CpuBackend::release_host_buffers(bool all) {
  auto keep = deferred_host_frees_.begin();
  for (auto& d : deferred_host_frees_) {
    bool done = true;
    for (auto& f : d.fences) {
      if (all) f->wait();
      done = done && f->done();
    }
    if (done) {
      std::free(d.ptr);
    } else {
      *keep++ = std::move(d);
    }
  }
  deferred_host_frees_.erase(keep, deferred_host_frees_.end());
}

void CpuBackend::do_launch(StreamRole r, const OpCall& op) {
  check_failed();
  std::vector<void*> in, out;
  in.reserve(op.inputs.size());
  out.reserve(op.outputs.size());
  for (const auto& t : op.inputs) in.push_back(resolve(t));
  for (const auto& t : op.outputs) out.push_back(resolve(t));
  stream(r).enqueue([this, r, op, seq = host_seq(), starts = memory().records_timeline(),
                     in = std::move(in), out = std::move(out)] {
    run_timed(r, seq, starts, [&] {
      switch (op.kind) {
        case OpKind::kLoadBatch:
          options_.batches.fill(op, rank(), world_size(), static_cast<int64_t*>(out.at(0)),
                                static_cast<int64_t*>(out.at(1)));
          break;
        case OpKind::kInitParam:  // NOTE [Threaded host init]
          run_init_param(op, out.at(0), host_init_threads());
          break;
        default: run_kernel(op, in, out);
      }
    });
  });
}

gloo_backend::GlooProcessGroup& CpuBackend::process_group(const ProcessGroup& g, StreamRole r) {
  const std::string key = std::string(stream_name(r)) + "/" + g.key();
  std::lock_guard<std::mutex> lock(groups_mu_);
  auto it = groups_.find(key);
  if (it != groups_.end()) return *it->second;
  FULLSHARD_CHECK(g.size() == 1 || (options_.store && options_.device),
                  "a collective over several ranks needs a rendezvous store and a device");
  // A one-rank group exchanges nothing and has no store (a one-rank job); wrapping a null
  // store in a PrefixStore would bind a reference to it.
  auto store = options_.store ? gloo_backend::make_prefix_store(key, options_.store) : nullptr;
  auto pg = std::make_unique<gloo_backend::GlooProcessGroup>(store, options_.device, g, rank(),
                                                             options_.collectives);
  return *groups_.emplace(key, std::move(pg)).first->second;
}

void CpuBackend::do_collective(StreamRole r, const CollectiveCall& call,
                               const ProcessGroup& group) {
  check_failed();
  FULLSHARD_CHECK(group.index_of(rank()) >= 0,
                  "collective " + call.name + " on a group without this rank");
  void* in = resolve(call.input);
  void* out = resolve(call.output);
  stream(r).enqueue([this, r, call, group, in, out, seq = host_seq(),
                     starts = memory().records_timeline()] {
    auto& pg = process_group(group, r);
    run_timed(
        r, seq, starts,
        [&] {
          const DType dt = call.output.meta.dtype;
          switch (call.kind) {
            case CollectiveKind::kAllGather:
              pg.all_gather(in, out, static_cast<size_t>(call.input.meta.numel()), dt, call.name);
              break;
            case CollectiveKind::kReduceScatter:
              pg.reduce_scatter(in, out, static_cast<size_t>(call.output.meta.numel()), dt, call.op,
                                call.scale, call.name);
              break;
            case CollectiveKind::kAllReduce:
              if (in != out) std::memcpy(out, in, call.output.nbytes());
              pg.all_reduce(out, static_cast<size_t>(call.output.meta.numel()), dt, call.op,
                            call.scale, call.name);
              break;
            case CollectiveKind::kBroadcast:
              pg.broadcast(out, static_cast<size_t>(call.output.meta.numel()), dt, call.root,
                           call.name);
              break;
            case CollectiveKind::kBarrier: pg.barrier(call.name); break;
          }
        },
        &group.name);
  });
}

EventId CpuBackend::do_record_event(StreamRole r) {
  EventId id = ++next_event_;
  auto e = std::make_shared<CpuEvent>();
  events_.emplace(id, e);
  stream(r).record(std::move(e));
  return id;
}

void CpuBackend::do_wait_event(StreamRole r, EventId event) {
  auto it = events_.find(event);
  if (it == events_.end()) return;  // pruned: completed before a host synchronize
  stream(r).wait(it->second);
}

void CpuBackend::do_synchronize(EventId event) {
  auto it = events_.find(event);
  if (it != events_.end()) it->second->wait();
  check_failed();
  // Completed events can no longer delay anyone: forget them.
  for (auto e = events_.begin(); e != events_.end();)
    e = e->second->done() ? events_.erase(e) : std::next(e);
  release_host_buffers(false);
}

void CpuBackend::synchronize_device() {
  for (auto& s : streams_) s->drain();
  check_failed();
  release_host_buffers(false);
}

void CpuBackend::do_read_scalar(StreamRole r, const TensorRef& ref) {
  const uint8_t* p = resolve(ref);
  stream(r).enqueue([this, ref, p] {
    float v = 0;
    detail::load_f32(p, ref.meta.dtype, 0, 1, &v);
    std::lock_guard<std::mutex> lock(scalars_mu_);
    scalars_.push_back(v);
  });
}

std::vector<double> CpuBackend::take_scalars() {
  std::lock_guard<std::mutex> lock(scalars_mu_);
  return std::exchange(scalars_, {});
}

}  // namespace fullshard::cpu
