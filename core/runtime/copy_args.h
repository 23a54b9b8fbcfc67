#pragma once
// The typed arguments and operand layout of the fill / copy ops and FSDP2's copies around its
// collectives, decoded and checked once here for the CPU reference and the CUDA copy plans
// (NOTE [One op table] in op_table.h). dtype casts are each backend's own check.
#include <cstdint>
#include <vector>

#include "core/runtime/op.h"

namespace fullshard {

// kFill: () -> outputs..., every element `value` (absent: 0, new_zeros).  fargs {value}
struct FillArgs {
  double value = 0;

  void encode(OpCall& op) const;
  static FillArgs decode(const OpCall& op);
};

// kCopy: pairwise (or foreach) in[k] -> out[k] of the same numel (rows == 0), or a row concat
// (torch.cat dim -1) of several inputs into one output of `rows` rows.  iargs {rows} (concat)
struct CopyArgs {
  int64_t rows = 0;           // 0: pairwise
  std::vector<int64_t> cols;  // concat: each input's columns
  int64_t out_cols = 0;       // concat: the output's columns (their sum)

  void encode(OpCall& op) const;
  static CopyArgs decode(const OpCall& op);
};

// kAllGatherCopyIn: (shard_0 .. shard_{P-1}) -> this rank's all-gather slice, their
// concatenation (no attributes: NoArgs in the table). The elements the inputs hold.
int64_t decode_all_gather_copy_in(const OpCall& op);

// kAllGatherCopyOut: ag [W * row] (rank-major rows of n_0 ++ .. ++ n_{P-1}) -> out_j [W * n_j].
//   iargs {n_0, .., n_{P-1}, W}
struct AllGatherCopyOutArgs {
  std::vector<int64_t> sizes;  // n_j
  int64_t world = 1;           // W
  int64_t row = 0;             // sum of n_j

  void encode(OpCall& op) const;
  static AllGatherCopyOutArgs decode(const OpCall& op);
};

// kChunkCat (torch._chunk_cat(grads, 0, W)): grads g_j [d0_j, ...] -> out [W * row]; g_j's
// chunk is ceil(d0_j / W) rows of row_numel_j, zero-padded.  iargs {W}
struct ChunkCatArgs {
  struct Part {
    int64_t d0 = 0, row_numel = 0, chunk_rows = 0;
  };
  int64_t world = 1;
  std::vector<Part> parts;  // one per input
  int64_t row = 0;          // sum of chunk_rows * row_numel

  void encode(OpCall& op) const { op.iargs = {world}; }
  static ChunkCatArgs decode(const OpCall& op);
};

}  // namespace fullshard
