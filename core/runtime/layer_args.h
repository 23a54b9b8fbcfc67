#pragma once
// The typed arguments of the model's remaining op families (embeddings, loss, linear, gradient
// clipping, async TP's collective-matmuls) and of the two host fills every backend runs itself
// (kInitParam, kLoadBatch), decoded and checked once here (NOTE [One op table] in op_table.h).
#include <cstdint>

#include "core/runtime/op.h"

namespace fullshard {

// kEmbedding ((ids int64, weight [V, D]) -> y [ids..., D]) and its backward ((g [ids..., D],
// ids) -> grad_weight [V, D]). A vocab-parallel shard's rows start at vocab_start: ids outside
// [vocab_start, vocab_start + V) read zeros / add nothing.  iargs {vocab_start} (absent: -1,
// every id must be in [0, V))
struct EmbeddingArgs {
  int64_t vocab_start = -1;  // -1: not vocab-parallel
  int64_t vocab = 0, dim = 0, tokens = 0;

  void encode(OpCall& op) const;
  static EmbeddingArgs decode(const OpCall& op);
};

// kPositionEmbedding ((x [..., S, D], wpe [P, D]) -> x + wpe[p0:p0+S]) and its backward
// (g [..., S, D] -> grad_wpe [P, D]).  iargs {p0} (absent: 0)
struct PositionEmbeddingArgs {
  int64_t first_position = 0;  // p0
  int64_t seq = 0, dim = 0, positions = 0, rows = 0;

  void encode(OpCall& op) const;
  static PositionEmbeddingArgs decode(const OpCall& op);
};

// kNllLoss ((lp [rows, V], labels int64 [rows]) -> (loss, total_weight)) and kNllLossBackward
// ((grad_loss, labels, total_weight) -> grad_lp [rows, V]): F.nll_loss(reduction='mean').
//   iargs {ignore_index} (absent: -100, F.cross_entropy's default)
struct NllLossArgs {
  int64_t ignore_index = -100;
  int64_t rows = 0, vocab = 0;

  void encode(OpCall& op) const { op.iargs = {ignore_index}; }
  static NllLossArgs decode(const OpCall& op);
};

// kLinear, kLinearBackwardInput, kLinearBackwardWeight: y [M, N] = x [M, K] W^T [K, N] and its
// two gradients (the shape the compute model prices, NOTE [Kernel shapes]).  iargs {M, K, N}
struct LinearArgs {
  int64_t m = 0, k = 0, n = 0;

  void encode(OpCall& op) const { op.iargs = {m, k, n}; }
  static LinearArgs decode(const OpCall& op);
};

// kLinearBackwardBias: grad_b [N] = column sums of grad_y [M, N].  iargs {M, N}
struct LinearBiasArgs {
  int64_t m = 0, n = 0;

  void encode(OpCall& op) const { op.iargs = {m, n}; }
  static LinearBiasArgs decode(const OpCall& op);
};

// kClipGradScale: (total [1], grads...) -> (grads...).  fargs {max_norm}
struct ClipGradArgs {
  double max_norm = 0;

  void encode(OpCall& op) const { op.fargs = {max_norm}; }
  static ClipGradArgs decode(const OpCall& op);
};

// kAllGatherMatmul / kMatmulReduceScatter (simulator only): the product's rows per tp rank, its
// K, its N (summed over the weights of one all-gather) and the tp group's size.
//   iargs {M / tp, K, N, tp}
struct CollectiveMatmulArgs {
  int64_t rows_per_rank = 0, k = 0, n = 0, tp = 1;

  void encode(OpCall& op) const { op.iargs = {rows_per_rank, k, n, tp}; }
  static CollectiveMatmulArgs decode(const OpCall& op);
};

// kInitParam: a parameter's padded shard (NOTE [Sharding-independent init] in
// core/model/module.h; core/data/param_init.cc fills it). Rows [row_offset, row_offset +
// local_rows) of row_numel elements from generator stream `key`; with columns, the columns
// [col_offset, col_offset + row_numel) of rows full_row long (tp Shard(1)); with blocks, local
// row l is row l % block of block l / block of a tensor stacked from blocks sharded over tp.
//   iargs {row_offset, local_rows, row_numel, init (ParamInit), key (bit cast)
//          [, col_offset, full_row | , block, tp_index, tp]}; fargs {std}
struct InitParamArgs {
  enum class Layout { kRows, kColumns, kBlocks };
  int64_t row_offset = 0, local_rows = 0, row_numel = 0, init = 0, key = 0;
  double std = 0;
  Layout layout = Layout::kRows;
  int64_t col_offset = 0, full_row = 0;     // kColumns
  int64_t block = 0, tp_index = 0, tp = 1;  // kBlocks

  void encode(OpCall& op) const;
  static InitParamArgs decode(const OpCall& op);
};

// kLoadBatch: micro-batch `micro_batch` of step `step` into (tokens, labels) int64 [B, S]
// (core/data/text_corpus.cc fills it).  iargs {step, micro_batch[, accumulation[, split[,
// dp_rank, dp_size]]]}: split 1 reads validation batch `step`; dp_rank / dp_size (absent: the
// backend's rank and world) place the batch when ranks of a tp group share one.
struct LoadBatchArgs {
  int64_t step = 0, micro_batch = 0, accumulation = 1, split = 0;
  int64_t dp_rank = -1, dp_size = -1;  // -1: the backend's
  // Context parallelism: the tokens are this cp rank's shard of each sequence (its head and tail
  // chunks, NOTE [Context-parallel layout] in core/runtime/cp_layout.h); cp 1: whole sequences.
  int64_t cp = 1, cp_index = 0;
  int64_t batch = 0, seq = 0;  // the tokens' shape (seq: the local tokens, full sequence / cp)

  void encode(OpCall& op) const;
  static LoadBatchArgs decode(const OpCall& op);
};

}  // namespace fullshard
