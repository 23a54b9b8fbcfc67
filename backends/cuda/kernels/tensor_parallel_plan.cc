// Host side of the tensor-parallel kernels: operands decoded by the argument structs the CPU
// kernels use (core/runtime/tensor_parallel_args.h, eager_args.h), the block transpose's unit, and
// the dispatch of each kind to its launcher (tensor_parallel.cu).
#include "backends/cuda/kernels/tensor_parallel.h"

#include <cstdint>
#include <string>

#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"
#include "core/runtime/eager_args.h"
#include "core/runtime/op_args.h"
#include "core/runtime/tensor_parallel_args.h"

namespace fullshard::cuda {
namespace plan {
namespace {

void expect_float(const OpCall& op, const TensorMeta& m, const char* what) {
  FULLSHARD_CHECK(is_float(m.dtype), where(op) + what + " must be fp32, bf16 or fp16, got " +
                                         std::string(dtype_name(m.dtype)));
}

TpPlan transpose_blocks(const OpCall& op) {
  const auto [a, b, inner] = TransposeBlocksArgs::decode(op);  // tensor_parallel_args.h
  const TensorMeta& x = op.inputs[0].meta;
  TpPlan p;
  p.a = a;
  p.b = b;
  p.row_bytes = inner * static_cast<int64_t>(dtype_size(x.dtype));
  return p;
}

TpPlan rows_to_one(const OpCall& op) {    // kRowMax, kSumLastDim: [R, D] -> [R]
  const RowArgs r = RowArgs::decode(op);  // core/runtime/eager_args.h
  const TensorMeta &x = op.inputs[0].meta, &y = op.outputs[0].meta;
  TpPlan p;
  p.dim = r.dim;
  p.rows = r.rows;
  expect_float(op, x, "input");
  expect_float(op, y, "output");
  p.scale = r.scale;
  return p;
}

TpPlan sub_row(const OpCall& op) {
  const RowArgs r = RowArgs::decode(op);  // core/runtime/eager_args.h
  const TensorMeta &a = op.inputs[0].meta, &b = op.inputs[1].meta, &y = op.outputs[0].meta;
  TpPlan p;
  p.dim = r.dim;
  p.rows = r.rows;
  expect_float(op, a, "a");
  expect_float(op, b, "b");
  expect_float(op, y, "output");
  return p;
}

TpPlan unary(const OpCall& op) {  // kExp, kLog
  decode_unary(op);               // core/runtime/op_args.h
  const TensorMeta &x = op.inputs[0].meta, &y = op.outputs[0].meta;
  expect_float(op, x, "input");
  expect_float(op, y, "output");
  TpPlan p;
  p.numel = x.numel();
  return p;
}

TpPlan nll_vocab_parallel(const OpCall& op) {
  const VocabParallelArgs v = VocabParallelArgs::decode(op);  // tensor_parallel_args.h
  const TensorMeta &lp = op.inputs[0].meta, &y = op.outputs[0].meta;
  TpPlan p;
  p.dim = v.dim;
  p.rows = v.rows;
  p.start = v.start;
  expect_float(op, lp, "log_probs");
  expect_float(op, y, "output");
  return p;
}

TpPlan nll_vocab_parallel_backward(const OpCall& op) {
  const VocabParallelArgs v = VocabParallelArgs::decode(op);  // tensor_parallel_args.h
  const TensorMeta &g = op.inputs[0].meta, &lp = op.inputs[1].meta, &y = op.outputs[0].meta;
  TpPlan p;
  p.dim = v.dim;
  p.rows = v.rows;
  p.start = v.start;
  p.scale = v.scale;
  expect_float(op, g, "grad");
  expect_float(op, lp, "log_probs");
  expect_float(op, y, "output");
  return p;
}

TpPlan narrow_copy(const OpCall& op) {
  const NarrowCopyArgs c = NarrowCopyArgs::decode(op);  // tensor_parallel_args.h
  const TensorMeta &x = op.inputs[0].meta, &y = op.outputs[0].meta;
  expect_float(op, x, "input");
  expect_float(op, y, "output");
  TpPlan p;
  p.scale = c.scale;
  p.narrow.rows = c.blocks;
  p.narrow.cols = c.n;
  p.narrow.src_off = c.in_offset;
  p.narrow.src_ld = c.in_width;
  p.narrow.src_limit = x.numel();  // every source index is inside the input: no padding
  p.narrow.dst_off = c.out_offset;
  p.narrow.dst_ld = c.out_width;
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
