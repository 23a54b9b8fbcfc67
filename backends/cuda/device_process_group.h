#pragma once
// Collectives on device tensors for one ProcessGroup, in stream order: what the CUDA backend's
// communication streams run. Two implementations: NcclProcessGroup (NCCL kernels on the
// stream) and StagedGlooProcessGroup (device -> pinned host -> Gloo -> device, for ranks that
// share a GPU). collective_transport.h chooses.
//
// enqueue() returns once the collective is queued on `stream`: later work on the stream runs
// after it, an event recorded on the stream after enqueue() completes after it. Errors (a dead
// or stalled peer) surface asynchronously, through failure() and the watchdog (watchdog.h).
#include <string>

#include <cuda_runtime_api.h>

#include "backends/cuda/collective_args.h"
#include "core/mesh/device_mesh.h"

namespace fullshard::cuda {

class DeviceProcessGroup {
 public:
  virtual ~DeviceProcessGroup() = default;
  virtual const ProcessGroup& group() const = 0;
  virtual int rank() const = 0;  // this rank's index in the group
  // `args` addresses are device memory (or pinned host memory, for offloaded tensors).
  virtual void enqueue(const CollectiveArgs& args, cudaStream_t stream) = 0;
  // "shard [0,1,2,3]": how error messages name the group.
  std::string text() const;
};

}  // namespace fullshard::cuda
