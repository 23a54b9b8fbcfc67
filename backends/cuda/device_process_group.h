#pragma once
// Collectives on device tensors for one ProcessGroup, in stream order: what the CUDA backend's
// communication streams run, through the process-group interface every real backend shares
// (NOTE [One interface per process group] in backends/common/collective_group.h), with the
// call decoded once (NOTE [One collective decoding]). Two implementations: NcclProcessGroup
// (NCCL kernels on the stream) and StagedGlooProcessGroup (device -> pinned host -> Gloo ->
// device, for ranks that share a GPU). collective_transport.h chooses.
//
// run() returns once the collective is queued on `stream`: later work on the stream runs after
// it, an event recorded on the stream after run() completes after it. Errors (a dead or stalled
// peer) surface asynchronously, through failure() and the watchdog (watchdog.h).
#include <cuda_runtime_api.h>

#include "backends/common/collective_args.h"
#include "backends/common/collective_group.h"

namespace fullshard::cuda {

using backends::CollectiveArgs;
using backends::decode_collective;
// `args` addresses are device memory (or pinned host memory, for offloaded tensors).
using DeviceProcessGroup = backends::CollectiveGroup<cudaStream_t>;

}  // namespace fullshard::cuda
