#include "core/runtime/context_parallel_args.h"

#include <string>

#include "core/common/error.h"
#include "core/runtime/op_args.h"

namespace fullshard {

void SdpaMergeArgs::encode(OpCall& op) const { op.iargs = {partial ? 1 : 0}; }

SdpaMergeArgs SdpaMergeArgs::decode(const OpCall& op) {
  FULLSHARD_CHECK(op.inputs.size() == 4 && op.outputs.size() >= 2 && op.iargs.size() == 1,
                  op_where(op) +
                      "needs (out, lse, block_out, block_lse) -> (out', lse', ..) and "
                      "iargs {partial}");
  const TensorMeta &o = op.inputs[0].meta, &l = op.inputs[1].meta, &bo = op.inputs[2].meta,
                   &bl = op.inputs[3].meta;
  FULLSHARD_CHECK(
      o.shape.size() == 3 && l.shape.size() == 3 && bo.shape.size() == 3 && bl.shape.size() == 3,
      op_where(op) + "out and block_out must be [B, L, H*hd], the lses [B, H, L]");
  SdpaMergeArgs a;
  a.partial = op.iargs[0] != 0;
  a.batch = o.shape[0];
  a.len = o.shape[1];
  a.heads = l.shape[1];
  a.block_len = bo.shape[1];
  FULLSHARD_CHECK(a.heads > 0 && o.shape[2] % a.heads == 0, op_where(op) + "heads do not divide");
  a.head_dim = o.shape[2] / a.heads;
  FULLSHARD_CHECK(o.dtype == DType::kFloat32 && l.dtype == DType::kFloat32 &&
                      bl.dtype == DType::kFloat32 && l.shape[0] == a.batch && l.shape[2] == a.len &&
                      bo.shape[0] == a.batch && bo.shape[2] == o.shape[2] &&
                      bl.shape[0] == a.batch && bl.shape[1] == a.heads &&
                      bl.shape[2] == a.block_len &&
                      (a.partial ? 2 * a.block_len == a.len : a.block_len == a.len),
                  op_where(op) + "operands do not match (partial: the block is half the rows)");
  const TensorMeta &no = op.outputs[0].meta, &nl = op.outputs[1].meta;
  FULLSHARD_CHECK(no.dtype == DType::kFloat32 && nl.dtype == DType::kFloat32 &&
                      no.numel() == o.numel() && nl.numel() == l.numel(),
                  op_where(op) + "out' and lse' must be fp32 of out's and lse's sizes");
  return a;
}

void SeqRowsArgs::encode(OpCall& op) const { op.iargs = {batch, rows, begin, n, width}; }

SeqRowsArgs SeqRowsArgs::decode(const OpCall& op) {
  FULLSHARD_CHECK(
      op.inputs.size() == 2 && op.outputs.size() == 1 && op.iargs.size() == 5,
      op_where(op) + "needs (dst, src) -> dst and iargs {batch, rows, begin, n, width}");
  SeqRowsArgs a{op.iargs[0], op.iargs[1], op.iargs[2], op.iargs[3], op.iargs[4]};
  FULLSHARD_CHECK(a.batch >= 0 && a.begin >= 0 && a.n >= 0 && a.begin + a.n <= a.rows &&
                      a.width >= 0 && op.inputs[0].meta.numel() == a.batch * a.rows * a.width &&
                      op.inputs[1].meta.numel() == a.batch * a.n * a.width &&
                      op.outputs[0].meta.numel() == op.inputs[0].meta.numel(),
                  op_where(op) + "rows out of range or sizes that do not match");
  return a;
}

}  // namespace fullshard
