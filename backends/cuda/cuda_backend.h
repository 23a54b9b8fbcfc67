#pragma once
// The CUDA backend (docs/cuda-backend.md, "The backend"): one rank's GPU as the host program
// sees it. Buffers are device memory from the shared caching allocator (CudaSegmentSource) or
// pinned host memory (CPU offload); each StreamRole is a cudaStream_t (StreamSet); kernels are
// backends/cuda/kernels; collectives go over NCCL (one communicator per process group) or over
// Gloo staged through pinned host memory (ranks sharing a GPU); a watchdog turns a dead or
// stalled peer into an error. The host program runs on the calling thread and only blocks
// where it says so (synchronize, copy_to_host).
#include <cstdint>
#include <memory>
#include <string>

#include "backends/common/measurements.h"
#include "backends/cuda/collective_transport.h"
#include "backends/cuda/cuda_communicator.h"
#include "backends/cuda/cuda_device.h"
#include "backends/gloo/process_group.h"
#include "core/data/text_corpus.h"
#include "core/runtime/backend.h"

namespace gloo::rendezvous {
class Store;
}

namespace fullshard::cuda {

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
  // This rank's pipeline channels (CudaCommunicatorOptions::pipeline_channels).
  std::vector<ProcessGroup> pipeline_channels;
  // The optional streams its program uses (optional_streams_used in stream_set.h), counted with
  // the others against the hardware queues when ranks share a GPU in one process.
  int optional_streams = 0;
};

// This process's CUDA backends on one device, counted for as long as one lives (NOTE [Staged
// gates and hardware queues] in staged_gloo_process_group.h): the constructor throws InputError
// when one more would exceed what the hardware queues allow.
class DeviceSharing {
 public:
  // `streams_per_rank`: this rank's streams (kCudaStreamCount and the optional ones it uses).
  DeviceSharing(int device, int streams_per_rank);
  ~DeviceSharing() { release(); }
  DeviceSharing(const DeviceSharing&) = delete;
  DeviceSharing& operator=(const DeviceSharing&) = delete;
  void release();  // once; the destructor does it otherwise

 private:
  int device_;
  bool counted_ = true;
};

// Its parts (NOTE [Backend parts] in core/runtime/backend.h): CudaDevice, CudaCommunicator and
// the shared MeasurementStore, filled from the device's timing events.
class CudaBackend : public Backend {
 public:
  // Selects device local_rank % visible GPUs and makes it current on the calling thread (the
  // host program's thread). Throws InputError when no GPU is visible, or when `transport` is
  // "nccl" while ranks share a GPU.
  explicit CudaBackend(CudaBackendOptions options);
  ~CudaBackend() override;

  // NOTE [Measured stream times on the GPU] (stream_times.h): with options.measure_streams,
  // timing events give each stream's busy intervals, the collectives' intervals and (with
  // the memory timeline recorded) the work starts, and every kernel's time with its launch's
  // host_seq (per-op times), on clock_s(): the host's steady clock since construction. Each take
  // waits for the work it reports; call it where the step is done.

  int device() const { return device_.device(); }
  CollectiveTransport transport() const { return transport_.transport; }
  const std::string& transport_reason() const { return transport_.reason; }
  // Device memory outside the allocator: cudaMemGetInfo's used (total - free) minus the
  // allocator's reserved bytes: CUDA context, cuBLASLt, NCCL. Device-wide: with several ranks
  // on one GPU it includes the other ranks' memory. 0 when used < reserved.
  uint64_t non_allocator_bytes() const;

 private:
  BatchSource batches_;
  TransportChoice transport_;
  DeviceSharing sharing_;                    // first, while nothing is built
  backends::MeasurementStore measurements_;  // the probe: the clock, filled by the device
  // Teardown (~CudaBackend): streams settled, the staged groups, the watchdog; then the NCCL
  // groups (the communicator), the device; the allocator's segments (Backend) after all of it.
  CudaDevice device_;
  CudaCommunicator communicator_;
};

// Number of GPUs visible to this process (0 without a driver or a device), for the launcher.
int visible_gpu_count();

}  // namespace fullshard::cuda
