#include "backends/cuda/cuda_backend.h"

#include <cstring>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "backends/common/host_fills.h"
#include "backends/common/scalar_read.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/device_memory.h"
#include "backends/cuda/device_probe.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/kernels/init_param.h"
#include "backends/cuda/kernels/cudnn_sdpa.h"
#include "backends/cuda/nccl_process_group.h"
#include "backends/cuda/nvtx_range.h"
#include "backends/cuda/pinned_host.h"
#include "backends/cuda/staged_gloo_process_group.h"
#include "backends/cuda/stream_set.h"
#include "backends/cuda/stream_timer.h"
#include "backends/cuda/watchdog.h"
#include "backends/gloo/rendezvous.h"
#include "core/common/error.h"
#include "core/data/param_init.h"

namespace fullshard::cuda {

// NOTE [Host work on the stream]: kernels whose tensors all live in pinned host memory (the
// CPU-offload optimizer: AdamW, grad-norm, accumulation on offloaded shards) run the CPU
// reference kernels (backends/cpu/kernels) in stream order, through cudaLaunchHostFunc: the
// stream reaches the host function after everything queued before it (the D2H copy of the
// gradient) and the work queued after it waits for it, with no host thread blocking. CUDA runs
// host functions on its own callback thread, one at a time for the whole process. Caveat: a
// host function must never wait for other GPU work or for another rank (it would hold that
// thread, and every stream of every rank of the process that reaches a host function would
// stall behind it: a deadlock when the awaited work is itself behind a host function). The CPU
// kernels only compute on memory that is ready, so they never wait; collectives never run in
// host functions (staged Gloo has its own worker threads, NOTE [Staged collectives in stream
// order]). A host function also may not call CUDA. An exception in one is kept here and
// rethrown at the next host call; later host work is skipped (NOTE [First error wins]).

namespace {

std::string describe(const OpCall& op) {
  return "op '" + op.name + "' (" + op_kind_name(op.kind) + ")";
}

// A failed CUDA runtime call during the host program: std::runtime_error naming the call, what
// it was for, and CUDA's words. Clears the (non-sticky) error state.
void check(cudaError_t e, const char* call, const std::string& what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw std::runtime_error(std::string(call) + " failed for " + what + ": " + cuda_error_text(e));
}

struct HostTask {
  std::shared_ptr<backends::FailureState> failure;
  std::function<void()> fn;
};

void CUDART_CB run_host_task(void* p) {
  std::unique_ptr<HostTask> t(static_cast<HostTask*>(p));
  if (t->failure->failed()) return;
  try {
    t->fn();
  } catch (...) {
    t->failure->fail(std::current_exception());
  }
}

std::unique_ptr<SegmentSource> select_device(const CudaBackendOptions& o) {
  const int n = gpu_count();
  if (n < 1)
    throw InputError(
        "--backend cuda",
        "no GPU visible (no NVIDIA driver, no device, or CUDA_VISIBLE_DEVICES hides them all)",
        "use --backend cpu, or run on a machine with a GPU");
  if (o.local_rank < 0)
    throw InputError("LOCAL_RANK", "is " + std::to_string(o.local_rank) + ", not a device index",
                     "set LOCAL_RANK to 0..LOCAL_WORLD_SIZE-1 (torchrun's convention)");
  const int dev = device_for_local_rank(o.local_rank, n);
  check(cudaSetDevice(dev), "cudaSetDevice",
        "rank " + std::to_string(o.rank) + " (device " + std::to_string(dev) + ")");
  return std::make_unique<CudaSegmentSource>(dev);
}

TransportChoice select_transport(const CudaBackendOptions& o) {
  std::optional<CollectiveTransport> requested;
  if (!o.transport.empty()) requested = parse_transport(o.transport, o.transport_where);
  return choose_transport(requested, o.local_world_size, gpu_count(), o.transport_where);
}

// NOTE [Staged gates and hardware queues] (staged_gloo_process_group.h): the CUDA backends of this
// process on each device.
std::mutex g_sharing_mu;
std::map<int, int> g_ranks_on_device;

int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice", "the CUDA backend");
  return d;
}

}  // namespace

int visible_gpu_count() { return gpu_count(); }

CudaBackend::CudaBackend(CudaBackendOptions o)
    : Backend(o.rank, o.world_size, o.allocator, select_device(o), o.record_timeline),
      options_(std::move(o)),
      device_(current_device()),
      transport_(select_transport(options_)) {
  {  // first, while nothing is built: NOTE [Staged gates and hardware queues]
    std::lock_guard<std::mutex> lock(g_sharing_mu);
    const int sharing = g_ranks_on_device[device_] + 1;
    const std::string why = shared_device_refusal(
        sharing, kNumStreams, device_max_connections(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS")),
        device_);
    if (!why.empty())
      throw InputError("CUDA_DEVICE_MAX_CONNECTIONS", why, shared_device_fix(kNumStreams));
    g_ranks_on_device[device_] = sharing;
  }
  try {
    events_ = std::make_unique<EventPool>();
    streams_ = std::make_unique<StreamSet>();
    if (cublasStatus_t st = cublasLtCreate(&lt_); st != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error("cublasLtCreate failed for the CUDA backend: status " +
                               std::to_string(static_cast<int>(st)));
    pinned_ = std::make_unique<PinnedHostMemory>(*events_, streams_->all());
    host_failure_ = std::make_shared<backends::FailureState>();
    watchdog_ = std::make_unique<CollectiveWatchdog>(rank(), device_, *events_);
    if (options_.measure_streams) {
      timer_ = std::make_unique<StreamTimer>();
      timer_->anchor(stream(StreamRole::kDefault), [this] { return clock_s(); });
    }
    // cudaFree synchronizes the device by itself, and cuMemUnmap needs the kernels using the
    // pages finished; settling only this rank's streams (not cudaDeviceSynchronize) keeps ranks
    // that share a GPU from waiting on each other here. Host functions are stream work: settled.
    static_cast<CudaSegmentSource*>(segment_source())->before_unmap = [this] { settle_streams(); };
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_sharing_mu);
    --g_ranks_on_device[device_];
    throw;
  }
}

CudaBackend::~CudaBackend() {
  {
    std::lock_guard<std::mutex> lock(g_sharing_mu);
    --g_ranks_on_device[device_];
  }
  settle_streams();
  // Nothing of ours may run when the allocator (Backend, after this body) gives segments back;
  // the source then synchronizes the device itself.
  static_cast<CudaSegmentSource*>(segment_source())->before_unmap = nullptr;
  // Staged-Gloo workers draining their queues report failures to the watchdog: they go first.
  gloo_groups_.clear();  // finishes queued collectives, joins the workers
  watchdog_.reset();     // before the NCCL groups it polls and the event pool
  nccl_groups_.clear();
  for (auto& p : pending_scalars_) events_->release(p.done);
  pending_scalars_.clear();
  events_by_id_.clear([this](cudaEvent_t e) { events_->release(e); });
  timer_.reset();
  pinned_.reset();  // waits for deferred frees, frees what is left (scalar slots included)
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  streams_.reset();
  events_.reset();
}

cudaStream_t CudaBackend::stream(StreamRole r) const { return streams_->get(r); }

double CudaBackend::clock_s() const { return measurements_.clock_s(); }

std::vector<std::pair<std::string, int64_t>> CudaBackend::path_counts() const {
  return cudnn_sdpa::path_counts();
}

uint64_t CudaBackend::non_allocator_bytes() const {
  check(cudaSetDevice(device_), "cudaSetDevice", "non_allocator_bytes");
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo", "non_allocator_bytes");
  const uint64_t used = total - free;
  const uint64_t reserved = memory().allocator_stats().reserved_bytes;
  return used > reserved ? used - reserved : 0;
}

backends::HostFillContext CudaBackend::host_fill_context() const {
  return {&options_.batches, rank(), world_size()};
}

void CudaBackend::check_failed() const {
  host_failure_->rethrow_if_failed();
  watchdog_->check();
}

void CudaBackend::settle_streams() {
  if (!streams_) return;
  for (StreamRole r : kAllStreams) {
    // Errors are reported by the calls that check; here only "nothing runs any more" matters.
    if (cudaStreamSynchronize(stream(r)) != cudaSuccess) cudaGetLastError();
  }
}

backends::Address CudaBackend::resolve(const TensorRef& ref) const {
  return addresses_.resolve(ref);
}

// ---- memory ----

void CudaBackend::on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) {
  uint8_t* p = nullptr;
  if (buffer.on_host) {
    p = static_cast<uint8_t*>(pinned_->allocate(buffer.bytes));
    if (p == nullptr)
      throw std::runtime_error("cudaHostAlloc of " + std::to_string(buffer.bytes) +
                               " bytes of pinned host memory for " + std::string(what) +
                               " failed (host out of pinnable memory)");
  } else {
    p = backends::BufferAddresses::block_address(buffer);
  }
  addresses_.add(buffer, p);
}

void CudaBackend::on_free(const Buffer& buffer) {
  const std::optional<backends::Address> a = addresses_.remove(buffer.id);
  if (!a || !a->on_host) return;
  // Deferred until every stream passed this point (NOTE [Pinned host frees]). free() must
  // not throw: a failure is rethrown at the next host call instead.
  try {
    pinned_->free(a->ptr);
  } catch (...) {
    host_failure_->fail(std::current_exception());
  }
}

// ---- kernels ----

void CudaBackend::run_on_host(StreamRole r, const OpCall& op, std::vector<void*> in,
                              std::vector<void*> out) {
  auto task = std::make_unique<HostTask>();
  task->failure = host_failure_;
  if (backends::is_host_fill(op.kind)) {
    task->fn = [op, out, ctx = host_fill_context()] { backends::run_host_fill(op, ctx, out); };
  } else {
    task->fn = [op, in = std::move(in), out = std::move(out)] { cpu::run_kernel(op, in, out); };
  }
  check(cudaLaunchHostFunc(stream(r), run_host_task, task.get()), "cudaLaunchHostFunc",
        describe(op));
  task.release();  // owned by the host function now
}

// NOTE [Staged host data]: kLoadBatch is defined on the host (core/data): the values are
// computed now, on the host thread, into a pinned staging buffer, and copied to the device in
// stream order. The staging buffer is freed right away through the pinned
// allocator's deferred free, which returns it only once every stream (this one's copy
// included) passed this point: the host never blocks and the copy never reads freed memory.
void CudaBackend::stage_to_device(StreamRole r, const OpCall& op, const void* host, void* device,
                                  uint64_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream(r)), "cudaMemcpyAsync",
        describe(op));
}

void CudaBackend::do_launch(StreamRole r, const OpCall& op) {
  const NvtxRange range(op.name);  // NOTE [NVTX ranges per op]
  launch_op(r, op);
}

void CudaBackend::do_collective(StreamRole r, const CollectiveCall& call,
                                const ProcessGroup& group) {
  enqueue_collective(r, call, group);
}

// NOTE [Only the enqueue is timed]: the enqueue of every kernel and collective between two
// timing events on its stream, and nothing of the host's own work (argument resolution, batch
// and init values, communicator setup): an event on an idle stream is stamped as the host
// records it, so host work inside the pair would count as the stream's busy time. What stays
// inside is the launch call itself (a few microseconds; only a device-side tracer such as CUPTI
// could remove it).
template <class Enqueue>
void CudaBackend::timed(StreamRole r, const std::string* group, Enqueue&& enqueue) {
  if (timer_) timer_->begin(r, stream(r), host_seq(), group);
  enqueue();
  if (timer_) timer_->end(stream(r));
}

void CudaBackend::collect_stream_times() {
  if (!timer_) return;
  double anchor_s = 0;
  const std::vector<TimedWork> work = timer_->take(&anchor_s);
  // Work starts while the memory timeline is recorded (the runner may turn it on after
  // construction: NOTE [Measured timeline] in runner/rank_runner.cc).
  measurements_.append(assemble_stream_times(work, anchor_s, memory().records_timeline()));
  // Re-anchored at every take: the float milliseconds span one step at most.
  timer_->anchor(stream(StreamRole::kDefault), [this] { return clock_s(); });
}

std::optional<StreamIntervals> CudaBackend::take_busy_intervals() {
  if (!timer_) return std::nullopt;
  check_failed();
  collect_stream_times();
  return measurements_.take_busy();
}

std::vector<CollectiveInterval> CudaBackend::take_collective_intervals() {
  if (!timer_) return {};
  check_failed();
  collect_stream_times();
  return measurements_.take_collectives();
}

std::vector<std::pair<uint64_t, double>> CudaBackend::take_work_starts() {
  if (!timer_) return {};
  check_failed();
  collect_stream_times();
  return measurements_.take_starts();
}

std::vector<KernelTime> CudaBackend::take_kernel_times() {
  if (!timer_) return {};
  check_failed();
  collect_stream_times();
  return measurements_.take_kernels();
}

void CudaBackend::launch_op(StreamRole r, const OpCall& op) {
  check_failed();
  std::vector<void*> in, out;
  in.reserve(op.inputs.size());
  out.reserve(op.outputs.size());
  bool any_host = false, any_device = false;
  auto add = [&](const TensorRef& t, std::vector<void*>& v) {
    const backends::Address p = resolve(t);
    v.push_back(p.ptr);
    if (t.buffer_id == 0) return;
    (p.on_host ? any_host : any_device) = true;
  };
  for (const auto& t : op.inputs) add(t, in);
  for (const auto& t : op.outputs) add(t, out);

  if (!any_device) {  // everything in host memory (CPU offload): CPU kernels in stream order
    timed(r, nullptr, [&] { run_on_host(r, op, std::move(in), std::move(out)); });
    return;
  }
  if (any_host) {
    // NOTE [Host-device copies]: FSDP2's offload copies (sharded param H2D, sharded grad D2H)
    // keep the dtype; a cast across the host boundary would need a device temporary the
    // simulator does not model, so it is refused rather than staged.
    const bool plain_copy = op.kind == OpKind::kCopy && op.inputs.size() == 1 &&
                            op.outputs.size() == 1 &&
                            op.inputs[0].meta.dtype == op.outputs[0].meta.dtype &&
                            op.inputs[0].nbytes() == op.outputs[0].nbytes();
    if (!plain_copy)
      throw InternalError(describe(op) +
                          " mixes host (CPU-offloaded) and device tensors; the CUDA backend only "
                          "copies between them "
                          "(kCopy, one input, same dtype and size): cast on the device side first");
    if (op.outputs[0].nbytes() > 0)
      timed(r, nullptr, [&] {
        check(cudaMemcpyAsync(out[0], in[0], op.outputs[0].nbytes(), cudaMemcpyDefault, stream(r)),
              "cudaMemcpyAsync", describe(op));
      });
    return;
  }
  if (op.kind == OpKind::kLoadBatch) {
    FULLSHARD_CHECK(op.outputs.size() == 2, describe(op) + " expects tokens and labels");
    const uint64_t nt = op.outputs[0].nbytes(), nl = op.outputs[1].nbytes();
    auto* staging = static_cast<uint8_t*>(pinned_->allocate(nt + nl));
    if (staging == nullptr)
      throw std::runtime_error("cudaHostAlloc of the staging buffer failed for " + describe(op));
    backends::fill_batch(op, host_fill_context(), staging, staging + nt);
    try {
      timed(r, nullptr, [&] {
        stage_to_device(r, op, staging, out[0], nt);
        stage_to_device(r, op, staging + nt, out[1], nl);
      });
    } catch (...) {
      pinned_->free(staging);
      throw;
    }
    pinned_->free(staging);  // NOTE [Staged host data]
    return;
  }
  if (op.kind == OpKind::kInitParam) {
    // Computed on the device from each element's index, bit-identical to the CPU backend (NOTE
    // [Bit-identical init on host and device]); the host only decodes the op.
    const init_gen::InitSpec spec = init_spec(op);
    const DType dt = op.outputs.at(0).meta.dtype;
    FULLSHARD_CHECK(dt == DType::kFloat32 || dt == DType::kBFloat16 || dt == DType::kFloat16,
                    describe(op) + ": a parameter of dtype " + std::string(dtype_name(dt)) +
                        ", not a floating one");
    timed(r, nullptr, [&] { launch::init_param(spec, dt, out[0], stream(r)); });
    return;
  }
  KernelContext ctx;
  ctx.stream = stream(r);
  ctx.lt = lt_;
  // cuBLASLt's workspace is this (host thread, stream) pair's cuBLAS workspace, which the shared
  // Backend::launch allocated before this GEMM as PyTorch does (NOTE [cuBLAS workspaces]); none
  // when the profile's blas_workspace_bytes is 0.
  if (const Buffer& ws = blas_workspace(r); ws && op_uses_blas(op.kind)) {
    ctx.gemm_workspace = reinterpret_cast<void*>(ws.block.address);
    ctx.gemm_workspace_bytes = ws.bytes;
  }
  try {
    timed(r, nullptr, [&] { launch_kernel(op, in, out, ctx); });
  } catch (const InternalError& e) {
    const std::string msg = e.what();
    // A failed launch is a CUDA error (runtime_error); anything else is a layout bug.
    if (msg.find("CUDA kernel launch") != std::string::npos)
      throw std::runtime_error(describe(op) + ": " + msg);
    throw InternalError(describe(op) + ": " + msg);
  }
}

// ---- collectives ----

std::shared_ptr<NcclProcessGroup> CudaBackend::nccl_group(const ProcessGroup& g) {
  const std::string key = g.key();
  auto it = nccl_groups_.find(key);
  if (it != nccl_groups_.end()) return it->second;
  FULLSHARD_CHECK(g.size() == 1 || options_.store != nullptr,
                  "an NCCL group of several ranks needs a rendezvous store");
  NcclProcessGroupOptions no;
  no.timeout = options_.collectives.timeout;
  // Collective over the members: every member issues its first collective on `g` in the same
  // host-program position, so they construct it in the same order.
  auto pg = std::make_shared<NcclProcessGroup>(options_.store, g, rank(), no);
  watchdog_->watch(pg);
  return nccl_groups_.emplace(key, std::move(pg)).first->second;
}

DeviceProcessGroup& CudaBackend::staged_group(const ProcessGroup& g, StreamRole r) {
  // One Gloo context per (stream, group), as the CPU backend (NOTE [Gloo threading rule]).
  const std::string key = std::string(stream_name(r)) + "/" + g.key();
  auto it = gloo_groups_.find(key);
  if (it != gloo_groups_.end()) return *it->second;
  std::shared_ptr<::gloo::rendezvous::Store> store;
  if (g.size() > 1) {
    FULLSHARD_CHECK(options_.store != nullptr,
                    "a staged Gloo group of several ranks needs a rendezvous store");
    if (!gloo_device_) gloo_device_ = gloo_backend::make_tcp_device(options_.hostname);
    store = gloo_backend::make_prefix_store(key, options_.store);
  }
  CollectiveWatchdog* wd = watchdog_.get();
  auto pg = std::make_unique<StagedGlooProcessGroup>(store, gloo_device_, g, rank(), device_,
                                                     options_.collectives, *pinned_, *events_,
                                                     [wd](const std::string& m) { wd->report(m); });
  return *gloo_groups_.emplace(key, std::move(pg)).first->second;
}

void CudaBackend::enqueue_collective(StreamRole r, const CollectiveCall& call,
                                     const ProcessGroup& group) {
  check_failed();
  // NOTE [One collective decoding] (backends/common/collective_args.h)
  const backends::CollectivePlan plan = backends::plan_collective(
      call, group, rank(), resolve(call.input).ptr, resolve(call.output).ptr);
  const CollectiveArgs& args = plan.args;
  cudaStream_t s = stream(r);
  // The process group first (a communicator's setup is host work: NOTE [Measured stream times on
  // the GPU]), then the copy and the collective between the timing events.
  auto copy_in = [&] {
    if (plan.copy_bytes > 0)
      check(cudaMemcpyAsync(args.output, plan.copy_from, plan.copy_bytes, cudaMemcpyDefault, s),
            "cudaMemcpyAsync", "all_reduce '" + call.name + "' (input copied to output)");
  };
  if (transport_.transport == CollectiveTransport::kNccl) {
    std::shared_ptr<NcclProcessGroup> pg = nccl_group(group);
    try {
      timed(r, &group.name, [&] {
        copy_in();
        pg->run(args, s);
      });
    } catch (const std::exception& e) {
      watchdog_->report(e.what());  // first error wins; aborts the other communicators
      throw;
    }
    watchdog_->track(pg, args, s, options_.collectives.timeout);
  } else {
    DeviceProcessGroup& pg = staged_group(group, r);
    timed(r, &group.name, [&] {
      copy_in();
      pg.run(args, s);
    });
  }
}

// ---- events ----

EventId CudaBackend::do_record_event(StreamRole r) {
  check_failed();
  cudaEvent_t e = events_->acquire();
  if (cudaError_t err = cudaEventRecord(e, stream(r)); err != cudaSuccess) {
    events_->release(e);
    check(err, "cudaEventRecord", std::string("an event on stream ") + std::string(stream_name(r)));
  }
  return events_by_id_.add(e);
}

void CudaBackend::do_wait_event(StreamRole r, EventId event) {
  check_failed();
  const cudaEvent_t* e = events_by_id_.find(event);
  if (e == nullptr) return;  // NOTE [Pruned events]
  check(cudaStreamWaitEvent(stream(r), *e, 0), "cudaStreamWaitEvent",
        "event " + std::to_string(event) + " on stream " + std::string(stream_name(r)));
}

void CudaBackend::prune_events() {
  events_by_id_.prune([this](EventId id, cudaEvent_t e) {
    const cudaError_t q = cudaEventQuery(e);
    if (q == cudaErrorNotReady) {
      cudaGetLastError();  // NOTE [Not ready is not an error]
      return false;
    }
    check(q, "cudaEventQuery", "event " + std::to_string(id));
    events_->release(e);  // completed: nobody can be delayed by it any more
    return true;
  });
}

void CudaBackend::do_synchronize(EventId event) {
  check_failed();
  if (const cudaEvent_t* e = events_by_id_.find(event))
    check(cudaEventSynchronize(*e), "cudaEventSynchronize",
          "the work before event " + std::to_string(event));
  check_failed();
  prune_events();
  pinned_->reclaim(false);
}

void CudaBackend::synchronize_device() {
  for (StreamRole r : kAllStreams)
    check(cudaStreamSynchronize(stream(r)), "cudaStreamSynchronize",
          "stream " + std::string(stream_name(r)));
  check_failed();
  prune_events();
  pinned_->reclaim(false);
}

void CudaBackend::copy_to_host(const TensorRef& ref, void* dst) {
  synchronize_device();
  const backends::Address p = resolve(ref);
  if (ref.nbytes() > 0)
    check(cudaMemcpy(dst, p.ptr, ref.nbytes(), cudaMemcpyDefault), "cudaMemcpy",
          "copy_to_host of buffer " + std::to_string(ref.buffer_id));
}

// Loading a checkpoint or weights (runner/checkpoint.cc, runner/init_weights.cc): the host's
// bytes into the tensor once every stream is idle, as copy_to_host reads them.
void CudaBackend::copy_from_host(const TensorRef& ref, const void* src) {
  synchronize_device();
  const backends::Address p = resolve(ref);
  if (ref.nbytes() > 0)
    check(cudaMemcpy(p.ptr, src, ref.nbytes(), cudaMemcpyDefault), "cudaMemcpy",
          "copy_from_host of buffer " + std::to_string(ref.buffer_id));
}

// ---- scalars ----

void CudaBackend::do_read_scalar(StreamRole r, const TensorRef& ref) {
  check_failed();
  const DType dt = ref.meta.dtype;
  backends::check_scalar_dtype(dt);
  const backends::Address p = resolve(ref);
  if (free_scalar_slots_.empty()) {
    auto* slot = static_cast<uint8_t*>(pinned_->allocate(16));
    if (slot == nullptr)
      throw std::runtime_error("cudaHostAlloc of a scalar read-back slot failed");
    all_scalar_slots_.push_back(slot);
    free_scalar_slots_.push_back(slot);
  }
  uint8_t* slot = free_scalar_slots_.back();
  check(cudaMemcpyAsync(slot, p.ptr, dtype_size(dt), cudaMemcpyDefault, stream(r)),
        "cudaMemcpyAsync", "read_scalar of buffer " + std::to_string(ref.buffer_id));
  cudaEvent_t e = events_->acquire();
  if (cudaError_t err = cudaEventRecord(e, stream(r)); err != cudaSuccess) {
    events_->release(e);
    check(err, "cudaEventRecord", "read_scalar");
  }
  free_scalar_slots_.pop_back();
  pending_scalars_.push_back(PendingScalar{slot, dt, e});
}

std::vector<double> CudaBackend::take_scalars() {
  check_failed();
  size_t done = 0;
  for (; done < pending_scalars_.size(); ++done) {
    PendingScalar& p = pending_scalars_[done];
    const cudaError_t q = cudaEventQuery(p.done);
    if (q == cudaErrorNotReady) {  // not covered by a synchronize yet: a later take
      cudaGetLastError();          // NOTE [Not ready is not an error]
      break;
    }
    check(q, "cudaEventQuery", "read_scalar");
    scalars_.push_back(backends::decode_scalar(p.slot, p.dtype));
    events_->release(p.done);
    free_scalar_slots_.push_back(p.slot);
  }
  pending_scalars_.erase(pending_scalars_.begin(),
                         pending_scalars_.begin() + static_cast<std::ptrdiff_t>(done));
  return std::exchange(scalars_, {});
}

}  // namespace fullshard::cuda
