#pragma once
// A CollectiveCall (core/runtime/op.h) decoded into what a process group runs: element counts,
// dtype, reduction and resolved addresses. Shared by the NCCL and the staged-Gloo process
// groups, so that both read a call exactly as the CPU backend does (cpu_backend.cc collective):
// all_gather: count = elements of this rank's input, output holds size x count;
// reduce_scatter: count = elements of this rank's output, input holds size x count;
// all_reduce / broadcast: count = elements of the output (all_reduce copies input first when
// it is a different buffer); barrier: no data.
#include <cstddef>
#include <string>

#include "backends/gloo/fingerprint.h"
#include "core/runtime/op.h"

namespace fullshard::cuda {

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

  size_t input_bytes(int group_size) const;   // bytes read from input
  size_t output_bytes(int group_size) const;  // bytes written to output
  // What error messages describe (gloo_backend::describe).
  gloo_backend::CallInfo info() const;
};

// Throws InternalError when the shapes do not fit the kind and the group size (a host-program
// bug), naming the collective.
CollectiveArgs decode_collective(const CollectiveCall& call, const void* input, void* output,
                                 int group_size);

}  // namespace fullshard::cuda
