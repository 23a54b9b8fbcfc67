#pragma once
// What a real device checks before it queues a kernel.
#include <string_view>

#include "core/runtime/op.h"

namespace fullshard::backends {

// Refuses, on the host and before anything is queued, a kind the device's kernel library does not
// run: `has_kernel` is the backend's own list (cpu::has_kernel, cuda::has_kernel), since a backend
// may run kinds another does not yet (the op table's kOpSimulatedOnly rows are the ones no backend
// runs). The backend's host fills (kOpHostFill) always pass. The launcher refuses the
// scenarios that need a missing kind first, so reaching this is a program error. `backend` names
// the device in the message ("the CPU backend").
void check_runs_on_device(const OpCall& op, std::string_view backend, bool (*has_kernel)(OpKind));

}  // namespace fullshard::backends
