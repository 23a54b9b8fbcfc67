#pragma once
// Gloo's collectives on host memory behind the process-group interface (collective_group.h):
// what the CPU backend's streams run, and what a staged Gloo group (backends/cuda) runs on its
// staging buffer. run() returns when the collective is done on this rank; errors as
// GlooProcessGroup's (CollectiveError; InternalError for bad arguments).
#include <memory>

#include "backends/common/collective_group.h"
#include "backends/gloo/process_group.h"

namespace gloo::rendezvous {
class Store;
}
namespace gloo::transport {
class Device;
}

namespace fullshard::backends {

class GlooCollectiveGroup : public CollectiveGroup<CallingThread> {
 public:
  // As GlooProcessGroup's constructor (the members meet here, in the same order).
  GlooCollectiveGroup(std::shared_ptr<::gloo::rendezvous::Store> store,
                      std::shared_ptr<::gloo::transport::Device> device, const ProcessGroup& group,
                      int global_rank, gloo_backend::ProcessGroupOptions options = {});

  const ProcessGroup& group() const override { return pg_.group(); }
  int rank() const override { return pg_.rank(); }
  // all_reduce and broadcast in place on args.output (NOTE [One collective decoding]).
  void run(const CollectiveArgs& args, CallingThread) override;

 private:
  gloo_backend::GlooProcessGroup pg_;
};

}  // namespace fullshard::backends
