#pragma once
// Which blocks training.activation_checkpointing recomputes in the backward: the one rule the
// training program (block_checkpointing, core/train) and the scenario checks that count a
// block's forward calls (check_recorded_routing, moe_checks.cc) both read.
#include <cstdint>

#include "core/scenario/scenario.h"

namespace fullshard {

// True when block `i` (0-based) runs its forward again in the backward: every block under
// "full" and op-level selective AC (whose recompute replays the block's forward ops), every
// `every`-th block (1-based count, as torchtitan's selective layer AC) under "selective".
bool recomputes_block(const ActivationCheckpointing& ac, int64_t i);

}  // namespace fullshard
