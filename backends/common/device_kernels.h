#pragma once
// What a real device checks before it queues a kernel.
#include <string_view>

#include "core/runtime/op.h"

namespace fullshard::backends {

// Refuses, on the host and before anything is queued, a kind that no real device runs: the op
// table's kOpSimulatedOnly rows (mixture-of-experts, float8 and asynchronous tensor parallelism;
// the launcher refuses the scenarios that need them first, so reaching this is a program error).
// `backend` names the device in the message ("the CPU backend").
void check_runs_on_device(const OpCall& op, std::string_view backend);

}  // namespace fullshard::backends
