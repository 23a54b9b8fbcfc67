#include "simulator/cost/eager_kernels.h"

namespace fullshard::sim {

EagerKernels eager_kernels(OpKind kind) {
  switch (kind) {
    case OpKind::kRMSNorm: return {7, 9.0};
    case OpKind::kRMSNormBackward: return {12, 12.0};
    case OpKind::kRoPE:
    case OpKind::kRoPEBackward: return {3, 5.0};
    default: return {1, 1.0};
  }
}

}  // namespace fullshard::sim
