#include "core/runtime/layer_args.h"

#include <string>

#include "core/common/error.h"
#include "core/runtime/op_args.h"

namespace fullshard {

void EmbeddingArgs::encode(OpCall& op) const {
  op.iargs.clear();
  if (vocab_start >= 0) op.iargs = {vocab_start};
}

EmbeddingArgs EmbeddingArgs::decode(const OpCall& op) {
  check_arity(op, 2, 1);
  const bool backward = op.kind == OpKind::kEmbeddingBackward;
  const TensorMeta& ids = backward ? op.inputs[1].meta : op.inputs[0].meta;
  const TensorMeta& w = backward ? op.outputs[0].meta : op.inputs[1].meta;
  FULLSHARD_CHECK(ids.dtype == DType::kInt64, op_where(op) + "token ids must be int64");
  FULLSHARD_CHECK(w.shape.size() == 2, op_where(op) + "the embedding weight must be [V, D]");
  EmbeddingArgs e;
  e.vocab = w.shape[0];
  e.dim = w.shape[1];
  e.tokens = ids.numel();
  e.vocab_start = op.iargs.empty() ? -1 : op.iargs[0];
  FULLSHARD_CHECK(op.iargs.empty() || e.vocab_start >= 0,
                  op_where(op) + "negative vocab start " + std::to_string(e.vocab_start));
  const TensorMeta& rows = backward ? op.inputs[0].meta : op.outputs[0].meta;
  FULLSHARD_CHECK(
      rows.numel() == e.tokens * e.dim,
      op_where(op) + (backward ? "grad_y is not [ids..., D]" : "output is not [ids..., D]"));
  return e;
}

void PositionEmbeddingArgs::encode(OpCall& op) const {
  op.iargs.clear();
  if (first_position != 0) op.iargs = {first_position};
}

PositionEmbeddingArgs PositionEmbeddingArgs::decode(const OpCall& op) {
  const bool backward = op.kind == OpKind::kPositionEmbeddingBackward;
  check_arity(op, backward ? 1 : 2, 1);
  const TensorMeta& x = op.inputs[0].meta;
  const TensorMeta& w = backward ? op.outputs[0].meta : op.inputs[1].meta;
  FULLSHARD_CHECK(x.shape.size() >= 2 && w.shape.size() == 2 && w.shape[1] == x.shape.back(),
                  op_where(op) + "expects x [..., S, D] and wpe [P, D]");
  PositionEmbeddingArgs p;
  p.dim = x.shape.back();
  p.seq = x.shape[x.shape.size() - 2];
  p.positions = w.shape[0];
  p.rows = p.dim == 0 ? 0 : x.numel() / p.dim;
  p.first_position = op.iargs.empty() ? 0 : op.iargs[0];
  FULLSHARD_CHECK(p.first_position >= 0 && p.first_position + p.seq <= p.positions,
                  op_where(op) + "sequence longer than the position table");
  if (!backward)
    FULLSHARD_CHECK(op.outputs[0].meta.numel() == x.numel(),
                    op_where(op) + "output size differs from x");
  return p;
}

NllLossArgs NllLossArgs::decode(const OpCall& op) {
  const bool backward = op.kind == OpKind::kNllLossBackward;
  check_arity(op, backward ? 3 : 2, backward ? 1 : 2);
  const TensorMeta& lp = backward ? op.outputs[0].meta : op.inputs[0].meta;
  const TensorMeta& labels = op.inputs[1].meta;
  NllLossArgs a;
  a.ignore_index = op.iargs.empty() ? -100 : op.iargs[0];
  a.vocab = lp.shape.empty() ? 1 : lp.shape.back();
  FULLSHARD_CHECK(a.vocab > 0, op_where(op) + "empty class dim");
  a.rows = lp.numel() / a.vocab;
  FULLSHARD_CHECK(labels.dtype == DType::kInt64 && labels.numel() == a.rows,
                  op_where(op) + "labels must be int64 [rows]");
  return a;
}

LinearArgs LinearArgs::decode(const OpCall& op) {
  FULLSHARD_CHECK(op.iargs.size() >= 3, op_where(op) + "needs iargs = {M, K, N}");
  const LinearArgs l{op.iargs[0], op.iargs[1], op.iargs[2]};
  FULLSHARD_CHECK(l.m >= 0 && l.k >= 0 && l.n >= 0, op_where(op) + "negative dims");
  return l;
}

LinearBiasArgs LinearBiasArgs::decode(const OpCall& op) {
  check_arity(op, 1, 1);
  FULLSHARD_CHECK(op.iargs.size() >= 2, op_where(op) + "needs iargs = {M, N}");
  const LinearBiasArgs b{op.iargs[0], op.iargs[1]};
  FULLSHARD_CHECK(b.m >= 0 && b.n >= 0, op_where(op) + "negative dims");
  return b;
}

ClipGradArgs ClipGradArgs::decode(const OpCall& op) {
  FULLSHARD_CHECK(
      !op.inputs.empty() && op.outputs.size() + 1 == op.inputs.size() && !op.fargs.empty(),
      op_where(op) + "expects (total, grads...) -> (grads...) and fargs[0] = max_norm");
  FULLSHARD_CHECK(op.inputs[0].meta.numel() == 1, op_where(op) + "total must have one element");
  return {op.fargs[0]};
}

CollectiveMatmulArgs CollectiveMatmulArgs::decode(const OpCall& op) {
  FULLSHARD_CHECK(op.iargs.size() >= 4, op_where(op) + "needs iargs = {M / tp, K, N, tp}");
  const CollectiveMatmulArgs c{op.iargs[0], op.iargs[1], op.iargs[2], op.iargs[3]};
  FULLSHARD_CHECK(c.rows_per_rank >= 0 && c.k >= 0 && c.n >= 0 && c.tp >= 1,
                  op_where(op) + "bad collective-matmul dims");
  return c;
}

void InitParamArgs::encode(OpCall& op) const {
  op.iargs = {row_offset, local_rows, row_numel, init, key};
  if (layout == Layout::kColumns) op.iargs.insert(op.iargs.end(), {col_offset, full_row});
  if (layout == Layout::kBlocks) op.iargs.insert(op.iargs.end(), {block, tp_index, tp});
  op.fargs = {std};
}

InitParamArgs InitParamArgs::decode(const OpCall& op) {
  const std::string where = "kInitParam " + op.name + ": ";
  FULLSHARD_CHECK(op.outputs.size() == 1 &&
                      (op.iargs.size() == 5 || op.iargs.size() == 7 || op.iargs.size() == 8) &&
                      op.fargs.size() == 1,
                  where + "bad arguments");
  InitParamArgs a;
  a.row_offset = op.iargs[0];
  a.local_rows = op.iargs[1];
  a.row_numel = op.iargs[2];
  a.init = op.iargs[3];
  a.key = op.iargs[4];
  a.std = op.fargs[0];
  a.full_row = a.row_numel;
  FULLSHARD_CHECK(a.init >= 0 && a.init <= 3,
                  where + "unknown ParamInit " + std::to_string(a.init));
  FULLSHARD_CHECK(a.row_offset >= 0 && a.local_rows >= 0 && a.row_numel > 0, where + "bad rows");
  if (op.iargs.size() == 7) {
    a.layout = Layout::kColumns;
    a.col_offset = op.iargs[5];
    a.full_row = op.iargs[6];
    FULLSHARD_CHECK(a.col_offset >= 0 && a.col_offset + a.row_numel <= a.full_row,
                    where + "bad columns");
  } else if (op.iargs.size() == 8) {
    a.layout = Layout::kBlocks;
    a.block = op.iargs[5];
    a.tp_index = op.iargs[6];
    a.tp = op.iargs[7];
    FULLSHARD_CHECK(a.block > 0 && a.tp_index >= 0 && a.tp_index < a.tp, where + "bad blocks");
  }
  return a;
}

void LoadBatchArgs::encode(OpCall& op) const {
  op.iargs = {step, micro_batch, accumulation, split};
  if (dp_rank >= 0) op.iargs.insert(op.iargs.end(), {dp_rank, dp_size});
  if (cp > 1) {
    FULLSHARD_CHECK(dp_rank >= 0, "kLoadBatch: a cp shard needs the data-parallel index");
    op.iargs.insert(op.iargs.end(), {cp, cp_index});
  }
}

LoadBatchArgs LoadBatchArgs::decode(const OpCall& op) {
  FULLSHARD_CHECK(op.outputs.size() == 2 && op.iargs.size() >= 2,
                  "kLoadBatch " + op.name + ": bad arguments");
  const TensorMeta& m = op.outputs[0].meta;
  FULLSHARD_CHECK(m.shape.size() == 2 && m.dtype == DType::kInt64,
                  "kLoadBatch: tokens must be int64 [B, S]");
  LoadBatchArgs a;
  a.batch = m.shape[0];
  a.seq = m.shape[1];
  a.step = op.iargs[0];
  a.micro_batch = op.iargs[1];
  if (op.iargs.size() >= 3) a.accumulation = op.iargs[2];
  if (op.iargs.size() >= 4) a.split = op.iargs[3];
  if (op.iargs.size() >= 6) {
    a.dp_rank = op.iargs[4];
    a.dp_size = op.iargs[5];
  }
  if (op.iargs.size() >= 8) {
    a.cp = op.iargs[6];
    a.cp_index = op.iargs[7];
    FULLSHARD_CHECK(a.cp >= 1 && a.cp_index >= 0 && a.cp_index < a.cp && a.seq % 2 == 0,
                    "kLoadBatch " + op.name + ": bad cp shard (cp " + std::to_string(a.cp) +
                        ", index " + std::to_string(a.cp_index) + ", local seq " +
                        std::to_string(a.seq) + ")");
  }
  return a;
}

}  // namespace fullshard
