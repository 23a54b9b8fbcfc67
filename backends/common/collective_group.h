#pragma once
// NOTE [One interface per process group]: every real backend runs its collectives through one
// small interface per ProcessGroup (core/mesh/device_mesh.h), as Gloo's algorithms do: the
// backend decodes the CollectiveCall once (collective_args.h) and calls run(args, stream).
// `Stream` is where the collective goes: a cudaStream_t for the CUDA backend's NCCL and staged
// Gloo groups (run() returns once it is queued there, NOTE [Staged collectives in stream
// order]), CallingThread for Gloo on host memory (run() returns when it is done: the calling
// thread is the stream, a CPU stream worker or a staged group's worker). Implementations:
// GlooCollectiveGroup (gloo_collective_group.h), cuda::StagedGlooProcessGroup,
// cuda::NcclProcessGroup. Members must run a group's collectives in the same order.
#include <string>

#include "backends/common/collective_args.h"
#include "core/mesh/device_mesh.h"

namespace fullshard::backends {

template <class Stream>
class CollectiveGroup {
 public:
  virtual ~CollectiveGroup() = default;
  virtual const ProcessGroup& group() const = 0;
  virtual int rank() const = 0;  // this rank's index in the group
  // `args` addresses are memory the group can reach (host memory for Gloo; device or pinned
  // host memory for the CUDA groups).
  virtual void run(const CollectiveArgs& args, Stream stream) = 0;
  // "'shard' [0,1,2,3]": how error messages name the group.
  std::string text() const { return "'" + group().name + "' [" + group().key() + "]"; }
};

// The stream of a host group: the thread that calls run().
struct CallingThread {};

}  // namespace fullshard::backends
