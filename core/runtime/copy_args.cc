#include "core/runtime/copy_args.h"

#include <string>

#include "core/common/error.h"
#include "core/runtime/op_args.h"

namespace fullshard {

void FillArgs::encode(OpCall& op) const {
  op.fargs.clear();
  if (value != 0) op.fargs = {value};
}

FillArgs FillArgs::decode(const OpCall& op) {
  FULLSHARD_CHECK(op.inputs.empty() && !op.outputs.empty(),
                  op_where(op) + "expects no inputs and some outputs");
  return {op.fargs.empty() ? 0.0 : op.fargs[0]};
}

void CopyArgs::encode(OpCall& op) const {
  op.iargs.clear();
  if (rows > 0) op.iargs = {rows};
}

CopyArgs CopyArgs::decode(const OpCall& op) {
  FULLSHARD_CHECK(!op.inputs.empty() && !op.outputs.empty(),
                  op_where(op) + "expects inputs and outputs");
  CopyArgs c;
  if (op.inputs.size() == op.outputs.size()) {
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      const TensorMeta &s = op.inputs[k].meta, &d = op.outputs[k].meta;
      FULLSHARD_CHECK(s.numel() == d.numel(), op_where(op) + "copy between different sizes " +
                                                  shape_str(s.shape) + " and " +
                                                  shape_str(d.shape));
    }
    return c;
  }
  FULLSHARD_CHECK(op.outputs.size() == 1 && !op.iargs.empty() && op.iargs[0] > 0,
                  op_where(op) + "several inputs need one output and iargs[0] = rows");
  c.rows = op.iargs[0];
  const TensorMeta& d = op.outputs[0].meta;
  FULLSHARD_CHECK(d.numel() % c.rows == 0, op_where(op) + "output does not split into rows");
  c.out_cols = d.numel() / c.rows;
  int64_t total = 0;
  for (const auto& r : op.inputs) {
    FULLSHARD_CHECK(r.meta.numel() % c.rows == 0,
                    op_where(op) + "an input does not split into rows");
    c.cols.push_back(r.meta.numel() / c.rows);
    total += c.cols.back();
  }
  FULLSHARD_CHECK(total == c.out_cols, op_where(op) + "input columns do not sum to the output's");
  return c;
}

int64_t decode_all_gather_copy_in(const OpCall& op) {
  FULLSHARD_CHECK(!op.inputs.empty() && op.outputs.size() == 1,
                  op_where(op) + "expects P inputs and one output");
  int64_t total = 0;
  for (const auto& r : op.inputs) total += r.meta.numel();
  FULLSHARD_CHECK(total == op.outputs[0].meta.numel(),
                  op_where(op) + "inputs hold " + std::to_string(total) + " elements, slice " +
                      std::to_string(op.outputs[0].meta.numel()));
  return total;
}

void AllGatherCopyOutArgs::encode(OpCall& op) const {
  op.iargs = sizes;
  op.iargs.push_back(world);
}

AllGatherCopyOutArgs AllGatherCopyOutArgs::decode(const OpCall& op) {
  const size_t P = op.outputs.size();
  FULLSHARD_CHECK(op.inputs.size() == 1 && P >= 1 && op.iargs.size() == P + 1,
                  op_where(op) + "expects one input, P outputs and iargs = {n_0..n_{P-1}, W}");
  AllGatherCopyOutArgs a;
  a.world = op.iargs[P];
  FULLSHARD_CHECK(a.world >= 1, op_where(op) + "world must be positive");
  a.sizes.assign(op.iargs.begin(), op.iargs.begin() + static_cast<std::ptrdiff_t>(P));
  for (int64_t n : a.sizes) {
    FULLSHARD_CHECK(n >= 0, op_where(op) + "negative split size");
    a.row += n;
  }
  FULLSHARD_CHECK(op.inputs[0].meta.numel() == a.world * a.row,
                  op_where(op) + "all-gather output is not W * sum(n_j)");
  for (size_t j = 0; j < P; ++j)
    FULLSHARD_CHECK(op.outputs[j].meta.numel() == a.world * a.sizes[j],
                    op_where(op) + "output " + std::to_string(j) + " is not W * n_j");
  return a;
}

ChunkCatArgs ChunkCatArgs::decode(const OpCall& op) {
  FULLSHARD_CHECK(
      !op.inputs.empty() && op.outputs.size() == 1 && !op.iargs.empty() && op.iargs[0] >= 1,
      op_where(op) + "expects grads, one output and iargs = {W}");
  ChunkCatArgs c;
  c.world = op.iargs[0];
  for (const auto& r : op.inputs) {
    const Shape& sh = r.meta.shape;
    Part p;
    p.d0 = sh.empty() ? 1 : sh[0];
    p.row_numel = 1;
    for (size_t i = 1; i < sh.size(); ++i) p.row_numel *= sh[i];
    p.chunk_rows = (p.d0 + c.world - 1) / c.world;
    c.parts.push_back(p);
    c.row += p.chunk_rows * p.row_numel;
  }
  const TensorMeta& o = op.outputs[0].meta;
  FULLSHARD_CHECK(o.numel() == c.world * c.row,
                  op_where(op) + "output has " + std::to_string(o.numel()) +
                      " elements, expected W * padded row " + std::to_string(c.world * c.row));
  return c;
}

}  // namespace fullshard
