#include "core/model/context_parallel.h"

namespace fullshard {

const char* cp_rotate_method_name(CpRotateMethod m) {
  switch (m) {
    case CpRotateMethod::kAllGather: return "allgather";
    case CpRotateMethod::kAllToAll: return "alltoall";
  }
  return "?";
}

}  // namespace fullshard
