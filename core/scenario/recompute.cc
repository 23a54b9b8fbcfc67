#include "core/scenario/recompute.h"

namespace fullshard {

bool recomputes_block(const ActivationCheckpointing& ac, int64_t i) {
  switch (ac.mode) {
    case RecomputeMode::kNone: return false;
    case RecomputeMode::kFull:
    case RecomputeMode::kSelectiveOp: return true;
    case RecomputeMode::kSelectiveLayer: return (i + 1) % ac.every == 0;
  }
  return false;
}

}  // namespace fullshard
