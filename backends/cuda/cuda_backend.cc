#include "backends/cuda/cuda_backend.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "backends/cuda/device_memory.h"
#include "backends/cuda/device_probe.h"
#include "backends/cuda/staged_gloo_process_group.h"
#include "backends/cuda/stream_set.h"
#include "core/common/error.h"

namespace fullshard::cuda {

namespace {

void check(cudaError_t e, const char* call, const std::string& what) {
  check_host_call(e, call, what);
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

DeviceSharing::DeviceSharing(int device, int streams_per_rank) : device_(device) {
  std::lock_guard<std::mutex> lock(g_sharing_mu);
  const int sharing = g_ranks_on_device[device_] + 1;
  const std::string why = shared_device_refusal(
      sharing, streams_per_rank, device_max_connections(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS")),
      device_);
  if (!why.empty())
    throw InputError("CUDA_DEVICE_MAX_CONNECTIONS", why, shared_device_fix(streams_per_rank));
  g_ranks_on_device[device_] = sharing;
}

void DeviceSharing::release() {
  if (!counted_) return;
  counted_ = false;
  std::lock_guard<std::mutex> lock(g_sharing_mu);
  --g_ranks_on_device[device_];
}

CudaBackend::CudaBackend(CudaBackendOptions o)
    : Backend(o.rank, o.world_size, o.allocator, select_device(o), o.record_timeline),
      batches_(std::move(o.batches)),
      transport_(select_transport(o)),
      sharing_(current_device(), kCudaStreamCount + o.optional_streams),
      device_(*this, batches_, o.measure_streams, measurements_),
      communicator_(*this, device_,
                    CudaCommunicatorOptions{std::move(o.store), std::move(o.hostname),
                                            std::move(o.collectives), transport_.transport,
                                            std::move(o.pipeline_channels)}) {
  attach(device_, communicator_, &measurements_);
  measurements_.set_collector([this] { return device_.collect_stream_times(); });
  // cudaFree synchronizes the device by itself, and cuMemUnmap needs the kernels using the
  // pages finished; settling only this rank's streams (not cudaDeviceSynchronize) keeps ranks
  // that share a GPU from waiting on each other here. Host functions are stream work: settled.
  static_cast<CudaSegmentSource*>(segment_source())->before_unmap = [this] {
    device_.settle_streams();
  };
}

CudaBackend::~CudaBackend() {
  sharing_.release();
  device_.settle_streams();
  // Nothing of ours may run when the allocator (Backend, after the parts) gives segments back;
  // the source then synchronizes the device itself.
  static_cast<CudaSegmentSource*>(segment_source())->before_unmap = nullptr;
  // Staged-Gloo workers draining their queues report failures to the watchdog: they go first.
  communicator_.close_staged();  // finishes queued collectives, joins the workers
  device_.stop_watchdog();       // before the NCCL groups it polls and the event pool
}

uint64_t CudaBackend::non_allocator_bytes() const {
  check(cudaSetDevice(device()), "cudaSetDevice", "non_allocator_bytes");
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo", "non_allocator_bytes");
  const uint64_t used = total - free;
  const uint64_t reserved = memory().allocator_stats().reserved_bytes;
  return used > reserved ? used - reserved : 0;
}

}  // namespace fullshard::cuda
