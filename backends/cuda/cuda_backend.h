#pragma once
// The CUDA backend (docs/cuda-backend.md, "The backend"): one rank's GPU as the host program
// sees it. Buffers are device memory from the shared caching allocator (CudaSegmentSource) or
// pinned host memory (CPU offload); each StreamRole is a cudaStream_t (StreamSet); kernels are
// backends/cuda/kernels; collectives go over NCCL (one communicator per process group) or over
// Gloo staged through pinned host memory (ranks sharing a GPU); a watchdog turns a dead or
// stalled peer into an error. The host program runs on the calling thread and only blocks
// where it says so (synchronize, copy_to_host).
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "backends/common/buffer_addresses.h"
#include "backends/common/event_table.h"
#include "backends/common/failure_state.h"
#include "backends/common/host_fills.h"
#include "backends/common/measurements.h"
#include "backends/cuda/collective_transport.h"
#include "backends/cuda/device_process_group.h"
#include "backends/gloo/process_group.h"
#include "core/data/text_corpus.h"
#include "core/runtime/backend.h"

namespace gloo::rendezvous {
class Store;
}
namespace gloo::transport {
class Device;
}

namespace fullshard::cuda {

class CollectiveWatchdog;
class CudaSegmentSource;
class EventPool;
class NcclProcessGroup;
class PinnedHostMemory;
class StagedGlooProcessGroup;
class StreamSet;
class StreamTimer;

struct CudaBackendOptions {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  AllocatorOptions allocator;
  std::shared_ptr<::gloo::rendezvous::Store> store;  // rendezvous (NCCL unique ids, staged Gloo)
  std::string hostname = "127.0.0.1";                // staged Gloo's TCP device
  gloo_backend::ProcessGroupOptions collectives;     // timeout, fingerprints
  BatchSource batches;                               // kLoadBatch
  bool record_timeline = false;
  std::string transport;  // "", "nccl" or "gloo" (collective_transport.h rules)
  // How errors about `transport` name the option (the CLI flag that set it).
  std::string transport_where = "--collectives";
  // Timing events (NOTE [Measured stream times on the GPU]) around every kernel and collective
  // (per-stream busy times, the step's compute / communication split, measured timelines).
  bool measure_streams = true;
};

class CudaBackend : public Backend {
 public:
  // Selects device local_rank % visible GPUs and makes it current on the calling thread (the
  // host program's thread). Throws InputError when no GPU is visible, or when `transport` is
  // "nccl" while ranks share a GPU.
  explicit CudaBackend(CudaBackendOptions options);
  ~CudaBackend() override;

  std::vector<double> take_scalars() override;
  bool has_data() const override { return true; }
  void synchronize_device() override;
  void copy_to_host(const TensorRef& ref, void* dst) override;
  void copy_from_host(const TensorRef& ref, const void* src) override;
  // NOTE [Measured stream times on the GPU] (stream_times.h): with options.measure_streams,
  // timing events give each stream's busy intervals, the collectives' intervals and (with
  // the memory timeline recorded) the work starts, and every kernel's time with its launch's
  // host_seq (per-op times), on clock_s(): the host's steady clock since construction. Each take
  // waits for the work it reports; call it where the step is done.
  std::optional<StreamIntervals> take_busy_intervals() override;
  std::vector<CollectiveInterval> take_collective_intervals() override;
  std::vector<std::pair<uint64_t, double>> take_work_starts() override;
  std::vector<KernelTime> take_kernel_times() override;
  double clock_s() const override;
  // Attention calls of the cuDNN kinds by path (cudnn_sdpa::path_counts, process-wide).
  std::vector<std::pair<std::string, int64_t>> path_counts() const override;

  int device() const { return device_; }
  CollectiveTransport transport() const { return transport_.transport; }
  const std::string& transport_reason() const { return transport_.reason; }
  // Device memory outside the allocator: cudaMemGetInfo's used (total - free) minus the
  // allocator's reserved bytes: CUDA context, cuBLASLt, NCCL. Device-wide: with several ranks
  // on one GPU it includes the other ranks' memory. 0 when used < reserved.
  uint64_t non_allocator_bytes() const;

 protected:
  void do_launch(StreamRole stream, const OpCall& op) override;
  void do_collective(StreamRole stream, const CollectiveCall& call,
                     const ProcessGroup& group) override;
  EventId do_record_event(StreamRole stream) override;
  void do_wait_event(StreamRole stream, EventId event) override;
  void do_synchronize(EventId event) override;
  void do_read_scalar(StreamRole stream, const TensorRef& ref) override;
  void on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) override;
  void on_free(const Buffer& buffer) override;

 private:
  CudaBackendOptions options_;
  int device_;
  TransportChoice transport_;
  backends::MeasurementStore measurements_;  // the take_* hooks and clock_s()

  // Teardown order (~CudaBackend): drain streams, watchdog, process groups, pinned memory,
  // cuBLASLt, streams, events; the allocator's segments (Backend) after all of it.
  std::unique_ptr<EventPool> events_;
  std::unique_ptr<StreamSet> streams_;
  cublasLtHandle_t lt_ = nullptr;
  std::unique_ptr<PinnedHostMemory> pinned_;
  std::shared_ptr<::gloo::transport::Device> gloo_device_;  // staged Gloo's TCP device (lazy)
  std::map<std::string, std::shared_ptr<NcclProcessGroup>> nccl_groups_;        // by group key
  std::map<std::string, std::unique_ptr<StagedGlooProcessGroup>> gloo_groups_;  // by stream/group
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  std::unique_ptr<StreamTimer> timer_;  // null when options.measure_streams is false
  void collect_stream_times();
  void launch_op(StreamRole stream, const OpCall& op);
  void enqueue_collective(StreamRole stream, const CollectiveCall& call, const ProcessGroup& group);
  // Runs `enqueue` between a timing-event pair on `stream` (NOTE [Measured stream times on the
  // GPU]).
  template <class Enqueue>
  void timed(StreamRole stream, const std::string* group, Enqueue&& enqueue);

  backends::BufferAddresses addresses_;
  backends::EventTable<cudaEvent_t> events_by_id_;

  // read_scalar: one pinned slot per pending read, collected in request order.
  struct PendingScalar {
    uint8_t* slot;
    DType dtype;
    cudaEvent_t done;
  };
  std::vector<PendingScalar> pending_scalars_;
  std::vector<uint8_t*> free_scalar_slots_;
  std::vector<uint8_t*> all_scalar_slots_;
  std::vector<double> scalars_;

  // NOTE [Host work on the stream] (cuda_backend.cc): the first error of host work
  // (cudaLaunchHostFunc); rethrown at the next host call, later host work is skipped.
  std::shared_ptr<backends::FailureState> host_failure_;

  cudaStream_t stream(StreamRole r) const;
  backends::Address resolve(const TensorRef& ref) const;
  backends::HostFillContext host_fill_context() const;
  // Rethrows a collective (watchdog) or host-work failure.
  void check_failed() const;
  void settle_streams();  // every stream finished (no error check): before memory is given back
  void prune_events();
  void run_on_host(StreamRole r, const OpCall& op, std::vector<void*> in, std::vector<void*> out);
  void stage_to_device(StreamRole r, const OpCall& op, const void* host, void* device,
                       uint64_t bytes);
  DeviceProcessGroup& staged_group(const ProcessGroup& g, StreamRole r);
  std::shared_ptr<NcclProcessGroup> nccl_group(const ProcessGroup& g);
};

// Number of GPUs visible to this process (0 without a driver or a device), for the launcher.
int visible_gpu_count();

}  // namespace fullshard::cuda
