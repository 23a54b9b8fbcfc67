#pragma once
// The typed arguments of context parallelism's ring-attention kinds (kSdpaMerge, kSeqRowsAdd;
// core/model/ring_attention.cc builds them), decoded and checked once here (NOTE [One op table]
// in op_table.h).
#include <cstdint>

#include "core/runtime/op.h"

namespace fullshard {

// kSdpaMerge: _SDPAMerger._merge_one (PyTorch's _attention.py) of one round's block into the
// running output:
//   out' = out - sigmoid(block_lse - lse) * (out - block_out);  lse' = lse - logsigmoid(lse -
//   block_lse)
// over the block's rows, the other rows copied (partial: the block is rows [L - Lq, L), the
// second half). iargs {partial}; B, L, H, hd from the operands: out [B, L, H*hd], lse [B, H, L],
// block_out [B, Lq, H*hd], block_lse [B, H, Lq]; outputs out' and lse' then any scratch.
struct SdpaMergeArgs {
  bool partial = false;
  int64_t batch = 0, len = 0, heads = 0, head_dim = 0, block_len = 0;  // decoded

  void encode(OpCall& op) const;
  static SdpaMergeArgs decode(const OpCall& op);
};

// kSeqRowsAdd (dst, src) -> dst, in place: dst viewed as [batch, rows, width], src as [batch, n,
// width]; dst rows [begin, begin + n) of each batch += src. iargs {batch, rows, begin, n, width}.
struct SeqRowsArgs {
  int64_t batch = 0, rows = 0, begin = 0, n = 0, width = 0;

  void encode(OpCall& op) const;
  static SeqRowsArgs decode(const OpCall& op);
};

}  // namespace fullshard
