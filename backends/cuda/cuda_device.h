#pragma once
// The CUDA backend's device part (NOTE [Backend parts] in core/runtime/backend.h): one rank's
// GPU. Buffers are device memory (the allocator's segments) or pinned host memory (CPU
// offload); each StreamRole is a cudaStream_t (StreamSet); kernels are backends/cuda/kernels;
// timing events around each kernel and collective fill the backend's MeasurementStore (NOTE
// [Measured stream times on the GPU] in stream_times.h); a watchdog turns a failed collective
// into an error at the next host call.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "backends/common/buffer_addresses.h"
#include "backends/common/event_table.h"
#include "backends/common/failure_state.h"
#include "backends/common/host_fills.h"
#include "backends/common/measurements.h"
#include "core/data/text_corpus.h"
#include "core/runtime/backend.h"

namespace fullshard::cuda {

class CollectiveWatchdog;
class EventPool;
class Float8Staging;
class PinnedHostMemory;
class StreamSet;
class StreamTimer;

// A failed CUDA runtime call during the host program: std::runtime_error naming the call, what
// it was for, and CUDA's words. Clears the (non-sticky) error state.
void check_host_call(cudaError_t e, const char* call, const std::string& what);

class CudaDevice : public Device {
 public:
  // On the current device (CudaBackend selected it). `host` (rank, host_seq, the cuBLAS
  // workspaces, the memory timeline), `batches` and `measurements` outlive the device.
  // `measure_streams`: timing events around every kernel and collective.
  CudaDevice(const Backend& host, const BatchSource& batches, bool measure_streams,
             backends::MeasurementStore& measurements);
  ~CudaDevice() override;

  void launch(StreamRole stream, const OpCall& op) override;
  EventId record_event(StreamRole stream) override;
  void wait_event(StreamRole stream, EventId event) override;
  void synchronize(EventId event) override;
  void read_scalar(StreamRole stream, const TensorRef& ref) override;
  std::vector<double> take_scalars() override;
  void on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) override;
  void on_free(const Buffer& buffer) override;
  void synchronize_device() override;
  void copy_idle(const TensorRef& ref, void* host, bool to_host) override;
  // Attention calls of the cuDNN kinds by path (cudnn_sdpa::path_counts, process-wide).
  std::vector<std::pair<std::string, int64_t>> path_counts() const override;

  // The probe's collector (MeasurementStore::set_collector): reads the timing events back into
  // the store; false without timing events. Waits for the work it reports.
  bool collect_stream_times();

  // ---- for the communicator (cuda_communicator.h) and the backend ----
  int device() const { return device_; }
  cudaStream_t stream(StreamRole r) const;
  backends::Address resolve(const TensorRef& ref) const { return addresses_.resolve(ref); }
  // Rethrows a collective (watchdog) or host-work failure.
  void check_failed() const;
  CollectiveWatchdog& watchdog() { return *watchdog_; }
  PinnedHostMemory& pinned() { return *pinned_; }
  EventPool& events() { return *events_; }
  // Runs `enqueue` between a timing-event pair on `stream` (NOTE [Only the enqueue is timed] in
  // cuda_device.cc); `group`: the process group's name for a collective.
  template <class Enqueue>
  void timed(StreamRole r, const std::string* group, Enqueue&& enqueue) {
    begin_timed(r, group);
    enqueue();
    end_timed(r);
  }
  // Every stream finished (no error check): before memory is given back.
  void settle_streams();
  // Stops the watchdog (teardown: after the staged groups, before the NCCL groups go).
  void stop_watchdog();

 private:
  const Backend& host_;
  const BatchSource& batches_;
  backends::MeasurementStore& measurements_;
  int device_;

  // Teardown order (~CudaDevice): watchdog, scalar and event handles, timer, pinned memory,
  // cuBLASLt, streams, the event pool.
  std::unique_ptr<EventPool> events_;
  std::unique_ptr<StreamSet> streams_;
  cublasLtHandle_t lt_ = nullptr;
  std::unique_ptr<PinnedHostMemory> pinned_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  std::unique_ptr<StreamTimer> timer_;  // null without timing events
  std::unique_ptr<Float8Staging> float8_staging_;  // NOTE [Float8 GEMM staging]

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

  // NOTE [Host work on the stream] (cuda_device.cc): the first error of host work
  // (cudaLaunchHostFunc); rethrown at the next host call, later host work is skipped.
  std::shared_ptr<backends::FailureState> host_failure_;

  void begin_timed(StreamRole r, const std::string* group);
  void end_timed(StreamRole r);
  backends::HostFillContext host_fill_context() const;
  void prune_events();
  void launch_op(StreamRole stream, const OpCall& op);
  void run_on_host(StreamRole r, const OpCall& op, std::vector<void*> in, std::vector<void*> out);
  void stage_to_device(StreamRole r, const OpCall& op, const void* host, void* device,
                       uint64_t bytes);
};

}  // namespace fullshard::cuda
