#pragma once
// The kRepeatKV / kRepeatKVBackward layout in one place (NOTE [One op table] in op_table.h): the
// CPU reference and the CUDA kernels decode and check it here, so they cannot drift.
//   iargs: kv_heads, n_rep, head_dim
//   the kv tensor [rows, kv_heads * head_dim]; the repeated one [rows, kv_heads * n_rep * head_dim]
//   (kRepeatKV: kv -> repeated; its backward: repeated -> kv)
#include <cstdint>

#include "core/runtime/op.h"

namespace fullshard {

struct RepeatKvArgs {
  int64_t rows = 0, kv_heads = 0, n_rep = 0, head_dim = 0;

  void encode(OpCall& op) const { op.iargs = {kv_heads, n_rep, head_dim}; }
  // Decodes and checks `op` (one input, one output; FULLSHARD_CHECK naming the op).
  static RepeatKvArgs decode(const OpCall& op);
};

}  // namespace fullshard
