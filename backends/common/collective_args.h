#pragma once
// NOTE [One collective decoding]: a CollectiveCall (core/runtime/op.h) decoded once into what a
// process group runs: element count, dtype, reduction, root and resolved addresses. Every
// real process group (the CPU's Gloo, the CUDA backend's staged Gloo and NCCL:
// collective_group.h) runs these args, so all read a call the same way:
//   all_gather: count = elements of this rank's input, output holds size x count;
//   reduce_scatter: count = elements of this rank's output, input holds size x count;
//   all_reduce / broadcast: count = elements of the output, run in place on it (an all_reduce
//     whose input is another buffer copies it into the output first: CollectivePlan);
//   barrier: no data.
// The dtype is the output's; input and output dtypes must agree. Anything else is a
// host-program bug: InternalError naming the collective.
#include <cstddef>
#include <string>
#include <vector>

#include "backends/gloo/fingerprint.h"
#include "core/mesh/device_mesh.h"
#include "core/runtime/op.h"

namespace fullshard::backends {

struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::kBarrier;
  size_t count = 0;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double scale = 1.0;
  int root = 0;  // broadcast: group rank
  std::string name;
  const void* input = nullptr;
  void* output = nullptr;
  // all_to_all: elements to / from each group rank (CollectiveCall::send_numels / recv_numels).
  std::vector<size_t> send_counts, recv_counts;

  size_t input_bytes(int group_size) const;   // bytes read from input
  size_t output_bytes(int group_size) const;  // bytes written to output
  // What error messages describe (gloo_backend::describe).
  gloo_backend::CallInfo info() const;
};

// Throws InternalError when the shapes do not fit the kind and the group size (a host-program
// bug), naming the collective.
CollectiveArgs decode_collective(const CollectiveCall& call, const void* input, void* output,
                                 int group_size);

// One CollectiveCall as a backend issues it on `group` from global rank `rank`: the args, and
// for an all_reduce of a distinct input the copy into the output that comes first (copy_bytes
// from copy_from to args.output; args.input is then the output).
struct CollectivePlan {
  CollectiveArgs args;
  const void* copy_from = nullptr;
  size_t copy_bytes = 0;
};

// InternalError when `rank` is not in `group` ("collective NAME on a group without this rank"),
// or as decode_collective.
CollectivePlan plan_collective(const CollectiveCall& call, const ProcessGroup& group, int rank,
                               const void* input, void* output);

}  // namespace fullshard::backends
