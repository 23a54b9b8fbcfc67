#include "backends/cuda/cuda_device.h"

#include <cstring>
#include <functional>
#include <stdexcept>
#include <utility>

#include "backends/common/device_kernels.h"
#include "backends/common/host_fills.h"
#include "backends/common/scalar_read.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/device_memory.h"
#include "backends/cuda/float8_staging.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/kernels/cudnn_sdpa.h"
#include "backends/cuda/kernels/init_param.h"
#include "backends/cuda/kernels/scaled_gemm_plan.h"
#include "backends/cuda/nvtx_range.h"
#include "backends/cuda/pinned_host.h"
#include "backends/cuda/stream_set.h"
#include "backends/cuda/stream_timer.h"
#include "backends/cuda/stream_times.h"
#include "backends/cuda/watchdog.h"
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

void check_host_call(cudaError_t e, const char* call, const std::string& what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw std::runtime_error(std::string(call) + " failed for " + what + ": " + cuda_error_text(e));
}

namespace {

std::string describe(const OpCall& op) {
  return "op '" + op.name + "' (" + op_kind_name(op.kind) + ")";
}

void check(cudaError_t e, const char* call, const std::string& what) {
  check_host_call(e, call, what);
}

int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice", "the CUDA backend");
  return d;
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

}  // namespace

CudaDevice::CudaDevice(const Backend& host, const BatchSource& batches, bool measure_streams,
                       backends::MeasurementStore& measurements)
    : Device(/*has_data=*/true),
      host_(host),
      batches_(batches),
      measurements_(measurements),
      device_(current_device()) {
  events_ = std::make_unique<EventPool>();
  streams_ = std::make_unique<StreamSet>();
  if (cublasStatus_t st = cublasLtCreate(&lt_); st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublasLtCreate failed for the CUDA backend: status " +
                             std::to_string(static_cast<int>(st)));
  pinned_ = std::make_unique<PinnedHostMemory>(*events_, streams_->all());
  float8_staging_ = std::make_unique<Float8Staging>();
  host_failure_ = std::make_shared<backends::FailureState>();
  watchdog_ = std::make_unique<CollectiveWatchdog>(host_.rank(), device_, *events_);
  if (measure_streams) {
    timer_ = std::make_unique<StreamTimer>();
    timer_->anchor(stream(StreamRole::kDefault), [this] { return measurements_.clock_s(); });
  }
}

CudaDevice::~CudaDevice() {
  settle_streams();
  watchdog_.reset();  // before the event pool (CudaBackend stopped it earlier: a no-op then)
  for (auto& p : pending_scalars_) events_->release(p.done);
  pending_scalars_.clear();
  events_by_id_.clear([this](cudaEvent_t e) { events_->release(e); });
  timer_.reset();
  float8_staging_.reset();  // the streams are settled
  pinned_.reset();  // waits for deferred frees, frees what is left (scalar slots included)
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  streams_.reset();
  events_.reset();
}

void CudaDevice::stop_watchdog() { watchdog_.reset(); }

cudaStream_t CudaDevice::stream(StreamRole r) const {
  if (!stream_is_optional(r) || streams_->created(r)) return streams_->get(r);
  // An optional stream's first use (the host thread's): pinned frees fence it from now on.
  cudaStream_t s = streams_->get(r);
  pinned_->add_stream(s);
  return s;
}

std::vector<std::pair<std::string, int64_t>> CudaDevice::path_counts() const {
  return cudnn_sdpa::path_counts();
}

backends::HostFillContext CudaDevice::host_fill_context() const {
  return {&batches_, host_.rank(), host_.world_size()};
}

void CudaDevice::check_failed() const {
  host_failure_->rethrow_if_failed();
  if (watchdog_) watchdog_->check();
}

void CudaDevice::settle_streams() {
  if (!streams_) return;
  // The created streams (an optional one not used yet is not made here).
  for (cudaStream_t s : streams_->all()) {
    // Errors are reported by the calls that check; here only "nothing runs any more" matters.
    if (cudaStreamSynchronize(s) != cudaSuccess) cudaGetLastError();
  }
}

// ---- memory ----

void CudaDevice::on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) {
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

void CudaDevice::on_free(const Buffer& buffer) {
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

void CudaDevice::run_on_host(StreamRole r, const OpCall& op, std::vector<void*> in,
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
void CudaDevice::stage_to_device(StreamRole r, const OpCall& op, const void* host, void* device,
                                 uint64_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream(r)), "cudaMemcpyAsync",
        describe(op));
}

void CudaDevice::launch(StreamRole r, const OpCall& op) {
  const NvtxRange range(op.name);  // NOTE [NVTX ranges per op]
  backends::check_runs_on_device(op, "the CUDA backend", &cuda::has_kernel);
  launch_op(r, op);
}

// NOTE [Only the enqueue is timed]: the enqueue of every kernel and collective between two
// timing events on its stream, and nothing of the host's own work (argument resolution, batch
// and init values, communicator setup): an event on an idle stream is stamped as the host
// records it, so host work inside the pair would count as the stream's busy time. What stays
// inside is the launch call itself (a few microseconds; only a device-side tracer such as CUPTI
// could remove it).
void CudaDevice::begin_timed(StreamRole r, const std::string* group) {
  if (timer_) timer_->begin(r, stream(r), host_.host_seq(), group);
}

void CudaDevice::end_timed(StreamRole r) {
  if (timer_) timer_->end(stream(r));
}

bool CudaDevice::collect_stream_times() {
  if (!timer_) return false;
  check_failed();
  double anchor_s = 0;
  const std::vector<TimedWork> work = timer_->take(&anchor_s);
  // Work starts while the memory timeline is recorded (the runner may turn it on after
  // construction: NOTE [Measured timeline] in runner/rank_runner.cc).
  measurements_.append(assemble_stream_times(work, anchor_s, host_.memory().records_timeline()));
  // Re-anchored at every take: the float milliseconds span one step at most.
  timer_->anchor(stream(StreamRole::kDefault), [this] { return measurements_.clock_s(); });
  return true;
}

void CudaDevice::launch_op(StreamRole r, const OpCall& op) {
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
  if (const Buffer& ws = host_.blas_workspace(r); ws && op_uses_blas(op.kind)) {
    ctx.gemm_workspace = reinterpret_cast<void*>(ws.block.address);
    ctx.gemm_workspace_bytes = ws.bytes;
  }
  try {
    // The float8 GEMMs stage in memory outside the allocator (NOTE [Float8 GEMM staging]); the
    // plan's checks throw here, before anything is enqueued or allocated.
    if (op.kind == OpKind::kScaledMM || op.kind == OpKind::kScaledMMBackwardInput ||
        op.kind == OpKind::kScaledMMBackwardWeight) {
      ctx.float8_staging_bytes = plan::plan_scaled_gemm(op).scratch_bytes;
      ctx.float8_staging = float8_staging_->reserve(r, stream(r), ctx.float8_staging_bytes);
    }
    timed(r, nullptr, [&] { launch_kernel(op, in, out, ctx); });
  } catch (const InternalError& e) {
    const std::string msg = e.what();
    // A failed launch is a CUDA error (runtime_error); anything else is a layout bug.
    if (msg.find("CUDA kernel launch") != std::string::npos)
      throw std::runtime_error(describe(op) + ": " + msg);
    throw InternalError(describe(op) + ": " + msg);
  }
}

// ---- events ----

EventId CudaDevice::record_event(StreamRole r) {
  check_failed();
  cudaEvent_t e = events_->acquire();
  if (cudaError_t err = cudaEventRecord(e, stream(r)); err != cudaSuccess) {
    events_->release(e);
    check(err, "cudaEventRecord", std::string("an event on stream ") + std::string(stream_name(r)));
  }
  return events_by_id_.add(e);
}

void CudaDevice::wait_event(StreamRole r, EventId event) {
  check_failed();
  const cudaEvent_t* e = events_by_id_.find(event);
  if (e == nullptr) return;  // NOTE [Pruned events]
  check(cudaStreamWaitEvent(stream(r), *e, 0), "cudaStreamWaitEvent",
        "event " + std::to_string(event) + " on stream " + std::string(stream_name(r)));
}

void CudaDevice::prune_events() {
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

void CudaDevice::synchronize(EventId event) {
  check_failed();
  if (const cudaEvent_t* e = events_by_id_.find(event))
    check(cudaEventSynchronize(*e), "cudaEventSynchronize",
          "the work before event " + std::to_string(event));
  check_failed();
  prune_events();
  pinned_->reclaim(false);
}

void CudaDevice::synchronize_device() {
  for (StreamRole r : kAllStreams)
    if (streams_->created(r))  // an optional stream not used yet is not made here
      check(cudaStreamSynchronize(stream(r)), "cudaStreamSynchronize",
            "stream " + std::string(stream_name(r)));
  check_failed();
  prune_events();
  pinned_->reclaim(false);
}

// Reading a tensor back, or loading a checkpoint or weights (runner/checkpoint.cc,
// runner/init_weights.cc): Device::copy_to_host / copy_from_host made every stream idle first.
void CudaDevice::copy_idle(const TensorRef& ref, void* host, bool to_host) {
  const backends::Address p = resolve(ref);
  if (ref.nbytes() == 0) return;
  check(to_host ? cudaMemcpy(host, p.ptr, ref.nbytes(), cudaMemcpyDefault)
                : cudaMemcpy(p.ptr, host, ref.nbytes(), cudaMemcpyDefault),
        "cudaMemcpy",
        std::string(to_host ? "copy_to_host" : "copy_from_host") + " of buffer " +
            std::to_string(ref.buffer_id));
}

// ---- scalars ----

void CudaDevice::read_scalar(StreamRole r, const TensorRef& ref) {
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

std::vector<double> CudaDevice::take_scalars() {
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
