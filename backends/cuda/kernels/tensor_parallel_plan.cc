// Host side of the tensor-parallel kernels: operand decoding with the checks of the CPU kernels
// (backends/cpu/kernels/loss_parallel.cc, eager.cc), the block transpose's unit, and the
// dispatch of each kind to its launcher (tensor_parallel.cu).
#include "backends/cuda/kernels/tensor_parallel.h"

#include <cstdint>
#include <string>

#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"

namespace fullshard::cuda {
namespace plan {
namespace {

void expect_float(const OpCall& op, const TensorMeta& m, const char* what) {
  FULLSHARD_CHECK(is_float(m.dtype), where(op) + what + " must be fp32, bf16 or fp16, got " +
                                         std::string(dtype_name(m.dtype)));
}

// Rows of D = iargs[0] elements (loss_parallel.cc width(), eager.cc row_width()).
int64_t width(const OpCall& op, const TensorMeta& m) {
  FULLSHARD_CHECK(!op.iargs.empty() && op.iargs[0] > 0 && m.numel() % op.iargs[0] == 0,
                  where(op) + "needs iargs[0] = D dividing the input");
  return op.iargs[0];
}

TpPlan transpose_blocks(const OpCall& op) {
  expect_arity(op, 1, 1);
  FULLSHARD_CHECK(op.iargs.size() == 3, where(op) + "needs iargs = {a, b, inner}");
  const int64_t a = op.iargs[0], b = op.iargs[1], inner = op.iargs[2];
  const TensorMeta &x = op.inputs[0].meta, &y = op.outputs[0].meta;
  FULLSHARD_CHECK(a > 0 && b > 0 && inner > 0 && x.numel() == a * b * inner &&
                      y.numel() == x.numel() && x.dtype == y.dtype,
                  where(op) + "in and out must both hold a * b * inner elements of one dtype");
  TpPlan p;
  p.a = a;
  p.b = b;
  p.row_bytes = inner * static_cast<int64_t>(dtype_size(x.dtype));
  return p;
}

TpPlan rows_to_one(const OpCall& op) {  // kRowMax, kSumLastDim: [R, D] -> [R]
  expect_arity(op, 1, 1);
  const TensorMeta &x = op.inputs[0].meta, &y = op.outputs[0].meta;
  TpPlan p;
  p.dim = width(op, x);
  p.rows = x.numel() / p.dim;
  FULLSHARD_CHECK(y.numel() == p.rows, where(op) + "output must have one element per row");
  expect_float(op, x, "input");
  expect_float(op, y, "output");
  if (op.kind == OpKind::kSumLastDim && !op.fargs.empty()) p.scale = op.fargs[0];
  return p;
}

TpPlan sub_row(const OpCall& op) {
  expect_arity(op, 2, 1);
  const TensorMeta &a = op.inputs[0].meta, &b = op.inputs[1].meta, &y = op.outputs[0].meta;
  TpPlan p;
  p.dim = width(op, a);
  p.rows = a.numel() / p.dim;
  FULLSHARD_CHECK(b.numel() == p.rows && y.numel() == a.numel(),
                  where(op) + "expects a [R, D], b [R], out [R, D]");
  expect_float(op, a, "a");
  expect_float(op, b, "b");
  expect_float(op, y, "output");
  return p;
}

TpPlan unary(const OpCall& op) {  // kExp, kLog
  expect_arity(op, 1, 1);
  const TensorMeta &x = op.inputs[0].meta, &y = op.outputs[0].meta;
  FULLSHARD_CHECK(x.numel() == y.numel(), where(op) + "in and out differ in size");
  expect_float(op, x, "input");
  expect_float(op, y, "output");
  TpPlan p;
  p.numel = x.numel();
  return p;
}

TpPlan nll_vocab_parallel(const OpCall& op) {
  expect_arity(op, 2, 1);
  FULLSHARD_CHECK(op.iargs.size() == 2, where(op) + "needs iargs = {D, start}");
  const TensorMeta &lp = op.inputs[0].meta, &t = op.inputs[1].meta, &y = op.outputs[0].meta;
  TpPlan p;
  p.dim = width(op, lp);
  p.rows = lp.numel() / p.dim;
  p.start = op.iargs[1];
  FULLSHARD_CHECK(t.dtype == DType::kInt64 && t.numel() == p.rows && y.numel() == p.rows,
                  where(op) + "expects lp [R, D], int64 targets [R], out [R]");
  expect_float(op, lp, "log_probs");
  expect_float(op, y, "output");
  return p;
}

TpPlan nll_vocab_parallel_backward(const OpCall& op) {
  expect_arity(op, 3, 1);
  FULLSHARD_CHECK(op.iargs.size() == 2 && op.fargs.size() == 1,
                  where(op) + "needs iargs = {D, start}, fargs = {scale}");
  const TensorMeta &g = op.inputs[0].meta, &lp = op.inputs[1].meta, &t = op.inputs[2].meta,
                   &y = op.outputs[0].meta;
  TpPlan p;
  p.dim = width(op, lp);
  p.rows = lp.numel() / p.dim;
  p.start = op.iargs[1];
  p.scale = op.fargs[0];
  FULLSHARD_CHECK(g.numel() == 1 && t.numel() == p.rows && y.numel() == lp.numel(),
                  where(op) + "expects a scalar grad, lp [R, D], targets [R], out [R, D]");
  // The CPU kernel reads the targets as int64 without checking; a device kernel must not read
  // past them, so the dtype is checked here.
  FULLSHARD_CHECK(t.dtype == DType::kInt64, where(op) + "targets must be int64");
  expect_float(op, g, "grad");
  expect_float(op, lp, "log_probs");
  expect_float(op, y, "output");
  return p;
}

TpPlan narrow_copy(const OpCall& op) {
  expect_arity(op, 1, 1);
  FULLSHARD_CHECK(op.iargs.size() >= 5,
                  where(op) + "needs iargs = {n, in_width, in_offset, out_width, out_offset}");
  const int64_t n = op.iargs[0], iw = op.iargs[1], io = op.iargs[2], ow = op.iargs[3],
                oo = op.iargs[4];
  const TensorMeta &x = op.inputs[0].meta, &y = op.outputs[0].meta;
  // As eager.cc, plus non-negative offsets (a device kernel must not write before its output).
  FULLSHARD_CHECK(n > 0 && iw > 0 && ow > 0 && io >= 0 && oo >= 0 && io + n <= iw && oo + n <= ow &&
                      x.numel() % iw == 0 && y.numel() % ow == 0 &&
                      x.numel() / iw == y.numel() / ow,
                  where(op) + "the blocks of in and out do not match");
  expect_float(op, x, "input");
  expect_float(op, y, "output");
  TpPlan p;
  p.scale = op.fargs.empty() ? 1.0 : op.fargs[0];
  p.narrow.rows = x.numel() / iw;
  p.narrow.cols = n;
  p.narrow.src_off = io;
  p.narrow.src_ld = iw;
  p.narrow.src_limit = x.numel();  // every source index is inside the input: no padding
  p.narrow.dst_off = oo;
  p.narrow.dst_ld = ow;
  return p;
}

}  // namespace

TpPlan plan_tensor_parallel(const OpCall& op) {
  switch (op.kind) {
    case OpKind::kTransposeBlocks: return transpose_blocks(op);
    case OpKind::kRowMax:
    case OpKind::kSumLastDim: return rows_to_one(op);
    case OpKind::kSubRow: return sub_row(op);
    case OpKind::kExp:
    case OpKind::kLog: return unary(op);
    case OpKind::kNllVocabParallel: return nll_vocab_parallel(op);
    case OpKind::kNllVocabParallelBackward: return nll_vocab_parallel_backward(op);
    case OpKind::kNarrowCopy: return narrow_copy(op);
    default: break;
  }
  FULLSHARD_CHECK(false, where(op) + "is not a tensor-parallel kind");
  return {};
}

BlockTranspose plan_block_transpose(int64_t a, int64_t b, int64_t row_bytes, const void* src,
                                    const void* dst) {
  const auto s = reinterpret_cast<uintptr_t>(src), d = reinterpret_cast<uintptr_t>(dst);
  BlockTranspose t;
  t.a = a;
  t.b = b;
  for (int unit : {16, 8, 4, 2, 1})
    if (row_bytes % unit == 0 && s % static_cast<uintptr_t>(unit) == 0 &&
        d % static_cast<uintptr_t>(unit) == 0) {
      t.unit = unit;
      break;
    }
  t.units = row_bytes / t.unit;
  return t;
}

}  // namespace plan

void launch_tensor_parallel(const OpCall& op, const std::vector<void*>& in,
                            const std::vector<void*>& out, cudaStream_t s) {
  const plan::TpPlan p = plan::plan_tensor_parallel(op);
  auto din = [&](size_t i) { return plan::dcode(op.inputs[i].meta.dtype); };
  const int dy = plan::dcode(op.outputs[0].meta.dtype);
  switch (op.kind) {
    case OpKind::kTransposeBlocks:
      return launch::block_transpose(
          plan::plan_block_transpose(p.a, p.b, p.row_bytes, in[0], out[0]), in[0], out[0], s);
    case OpKind::kRowMax: return launch::row_max(in[0], din(0), out[0], dy, p.rows, p.dim, s);
    case OpKind::kSumLastDim:
      return launch::sum_last_dim(in[0], din(0), out[0], dy, p.rows, p.dim, p.scale, s);
    case OpKind::kSubRow:
      return launch::sub_row(in[0], din(0), in[1], din(1), out[0], dy, p.rows, p.dim, s);
    case OpKind::kExp:
    case OpKind::kLog:
      return launch::tp_unary(
          op.kind == OpKind::kExp ? launch::TpUnary::kExp : launch::TpUnary::kLog, in[0], din(0),
          out[0], dy, p.numel, s);
    case OpKind::kNllVocabParallel:
      return launch::nll_vocab_parallel(in[0], din(0), static_cast<const int64_t*>(in[1]), out[0],
                                        dy, p.rows, p.dim, p.start, s);
    case OpKind::kNllVocabParallelBackward:
      return launch::nll_vocab_parallel_backward(in[0], din(0), static_cast<float>(p.scale), in[1],
                                                 din(1), static_cast<const int64_t*>(in[2]), out[0],
                                                 dy, p.rows, p.dim, p.start, s);
    case OpKind::kNarrowCopy:
      return launch::narrow_copy(p.narrow, in[0], din(0), out[0], dy, static_cast<float>(p.scale),
                                 s);
    default: break;
  }
  FULLSHARD_CHECK(false, plan::where(op) + "is not a tensor-parallel kind");
}

}  // namespace fullshard::cuda
