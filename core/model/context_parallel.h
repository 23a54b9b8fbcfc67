#pragma once
// Context parallelism (torch.distributed.tensor.experimental.context_parallel as torchtitan
// applies it): each sequence split over a cp mesh dim (NOTE [Context-parallel layout] in
// core/runtime/cp_layout.h), attention as ring attention (core/model/ring_attention.h).
#include <cstdint>

#include "core/mesh/device_mesh.h"

namespace fullshard {

// How K / V travel between the cp ranks: torchtitan's parallelism.context_parallel_rotate_method
// (PyTorch's set_rotate_method): "allgather" all-gathers every rank's K / V once before the
// rounds, "alltoall" passes them to the next rank each round (a permute, one all_to_all_single).
enum class CpRotateMethod : uint8_t { kAllGather, kAllToAll };
const char* cp_rotate_method_name(CpRotateMethod m);  // "allgather", "alltoall"

// This rank's view of the cp mesh dim.
struct ContextParallel {
  int degree = 1;  // size of the cp dim; 1 = no context parallelism
  int index = 0;   // this rank's coordinate along it
  ProcessGroup group;
  CpRotateMethod rotate = CpRotateMethod::kAllGather;
  bool enabled() const { return degree > 1; }
};

}  // namespace fullshard
