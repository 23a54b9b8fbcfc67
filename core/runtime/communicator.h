#pragma once
// The communicator part of a Backend (NOTE [Backend parts] in core/runtime/backend.h): runs (a
// real backend: its process groups per (group, stream), backends/common/collective_group.h) or
// records (the simulator: its GroupRegistry) one collective, in host order.
#include "core/mesh/device_mesh.h"
#include "core/runtime/op.h"
#include "core/runtime/stream.h"

namespace fullshard {

class Communicator {
 public:
  virtual ~Communicator() = default;
  // Called by Backend::collective after its tick; `group` contains this rank.
  virtual void collective(StreamRole stream, const CollectiveCall& call,
                          const ProcessGroup& group) = 0;
};

}  // namespace fullshard
