#include "core/runtime/moe_args.h"

#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/runtime/op_args.h"

namespace fullshard {
namespace {

bool is_floating(DType d) {
  return d == DType::kFloat32 || d == DType::kBFloat16 || d == DType::kFloat16;
}

// The operands a kind reads as numbers are floating: checked here once, so neither backend's
// kernels (backends/cpu/kernels/moe_*.cc, backends/cuda/kernels/moe_plan.cc) repeat it.
void expect_floating(const OpCall& op, const std::vector<TensorRef>& refs, const char* what,
                     std::initializer_list<size_t> which) {
  for (size_t i : which)
    FULLSHARD_CHECK(is_floating(refs[i].meta.dtype),
                    op_where(op) + what + " " + std::to_string(i) +
                        " must be fp32, bf16 or fp16, got " +
                        std::string(dtype_name(refs[i].meta.dtype)));
}

}  // namespace

RouterArgs RouterArgs::decode(const OpCall& op) {
  check_table_arity(op);
  FULLSHARD_CHECK(op.iargs.size() >= 3 && op.iargs[0] >= 0 && op.iargs[1] >= 1 &&
                      op.iargs[2] >= 0 && op.iargs[2] <= op.iargs[1],
                  op_where(op) + "needs iargs = {tokens, experts, top_k <= experts}");
  const RouterArgs a{op.iargs[0], op.iargs[1], op.iargs[2]};
  const int64_t ne = a.tokens * a.experts, nk = a.tokens * a.top_k;
  const TensorMeta& x = op.inputs[0].meta;
  const TensorMeta& y = op.outputs[0].meta;
  auto want = [&](bool ok, const char* what) { FULLSHARD_CHECK(ok, op_where(op) + what); };
  switch (op.kind) {
    case OpKind::kSoftmax:
    case OpKind::kSigmoid:
      want(x.numel() == ne && y.numel() == ne, "expects [N, E] in and out");
      expect_floating(op, op.inputs, "input", {0});
      break;
    case OpKind::kSoftmaxBackward:
    case OpKind::kSigmoidBackward:
      want(x.numel() == ne && op.inputs[1].meta.numel() == ne && y.numel() == ne,
           "expects (g, y) and out [N, E]");
      expect_floating(op, op.inputs, "input", {0, 1});
      break;
    case OpKind::kTopK:
      want(x.numel() == ne && y.numel() == nk && op.outputs[1].meta.numel() == nk &&
               op.outputs[1].meta.dtype == DType::kInt64,
           "expects scores [N, E] -> (values [N, K], int64 indices [N, K])");
      expect_floating(op, op.inputs, "input", {0});
      break;
    case OpKind::kTopKBackward:
      want(x.numel() == nk && op.inputs[1].meta.dtype == DType::kInt64 && y.numel() == ne,
           "expects (g [N, K], int64 indices [N, K]) -> [N, E]");
      expect_floating(op, op.inputs, "input", {0});
      break;
    case OpKind::kRouteNorm:
      want(x.numel() == nk && y.numel() == nk && op.outputs[1].meta.numel() == a.tokens,
           "expects s [N, K] -> (out [N, K], denominator [N])");
      expect_floating(op, op.inputs, "input", {0});
      break;
    case OpKind::kRouteNormBackward:
      want(x.numel() == nk && op.inputs[1].meta.numel() == nk &&
               op.inputs[2].meta.numel() == a.tokens && y.numel() == nk,
           "expects (g [N, K], s [N, K], denominator [N]) -> [N, K]");
      expect_floating(op, op.inputs, "input", {0, 1, 2});
      break;
    case OpKind::kGatherScores:
      want(x.numel() == ne && x.dtype == DType::kFloat32 && op.inputs[1].meta.numel() == nk &&
               op.inputs[1].meta.dtype == DType::kInt64 && y.numel() == nk &&
               y.dtype == DType::kFloat32,
           "expects (fp32 scores [N, E], int64 indices [N, K]) -> fp32 [N, K]");
      break;
    case OpKind::kHistogram:
      want(x.numel() == nk && x.dtype == DType::kInt64 && y.numel() == a.experts,
           "expects int64 indices [N, K] -> counts [E]");
      break;
    case OpKind::kWeightedSum: {
      const TensorMeta& v = op.inputs[1].meta;
      want(x.numel() == nk && a.top_k >= 1 && v.numel() % nk == 0 &&
               y.numel() == v.numel() / a.top_k,
           "expects (w [N, K], y [N, K, D]) -> [N, D]");
      expect_floating(op, op.inputs, "input", {0, 1});
      break;
    }
    case OpKind::kWeightedSumBackward: {
      const TensorMeta& w = op.inputs[1].meta;
      const TensorMeta& v = op.inputs[2].meta;
      want(w.numel() == nk && a.top_k >= 1 && x.numel() * a.top_k == v.numel() && y.numel() == nk &&
               op.outputs[1].meta.numel() == v.numel(),
           "expects (g [N, D], w [N, K], y [N, K, D]) -> (g_w, g_y)");
      expect_floating(op, op.inputs, "input", {0, 1, 2});
      break;
    }
    default: want(false, "is not a router op");
  }
  for (const TensorRef& t : op.outputs)
    if (op.kind != OpKind::kTopK || &t == &op.outputs[0])
      want(is_floating(t.meta.dtype), "writes a floating output");
  return a;
}

CapacityArgs CapacityArgs::decode(const OpCall& op) {
  check_table_arity(op);
  FULLSHARD_CHECK(op.iargs.size() >= 5 && op.iargs[0] >= 0 && op.iargs[1] >= 1 &&
                      op.iargs[2] >= 1 && op.iargs[2] <= op.iargs[1] && op.iargs[3] >= 0 &&
                      (op.iargs[4] == 0 || op.iargs[4] == 1),
                  op_where(op) +
                      "needs iargs = {tokens, experts, top_k <= experts, capacity, policy 0 | 1}");
  const CapacityArgs a{op.iargs[0], op.iargs[1], op.iargs[2], op.iargs[3], op.iargs[4]};
  const int64_t nk = a.tokens * a.top_k;
  const TensorMeta &s = op.inputs[0].meta, &i = op.inputs[1].meta, &y = op.outputs[0].meta;
  FULLSHARD_CHECK(s.numel() == nk && s.dtype == DType::kFloat32 && i.numel() == nk &&
                      i.dtype == DType::kInt64 && y.numel() == nk && y.dtype == DType::kInt64,
                  op_where(op) + "expects (fp32 scores [N, K], int64 indices [N, K]) -> int64 [N, K]");
  return a;
}

RouterChoiceArgs RouterChoiceArgs::decode(const OpCall& op) {
  check_table_arity(op);
  FULLSHARD_CHECK(op.iargs.size() >= 4 && op.iargs[0] >= 0 && op.iargs[1] >= 1 &&
                      op.iargs[2] >= 1 && op.iargs[1] % op.iargs[2] == 0 && op.iargs[3] >= 1 &&
                      op.iargs[3] <= op.iargs[2] &&
                      (op.iargs[2] == 1 || op.iargs[1] / op.iargs[2] >= 2),
                  op_where(op) +
                      "needs iargs = {tokens, experts, groups dividing experts (2+ experts "
                      "each), limited <= groups}");
  const RouterChoiceArgs a{op.iargs[0], op.iargs[1], op.iargs[2], op.iargs[3]};
  const int64_t ne = a.tokens * a.experts;
  const TensorMeta &s = op.inputs[0].meta, &y = op.outputs[0].meta;
  FULLSHARD_CHECK(s.numel() == ne && s.dtype == DType::kFloat32 && y.numel() == ne &&
                      y.dtype == DType::kFloat32 &&
                      (op.inputs.size() < 2 || (op.inputs[1].meta.numel() == a.experts &&
                                                op.inputs[1].meta.dtype == DType::kFloat32)),
                  op_where(op) + "expects (fp32 scores [N, E] [, fp32 bias [E]]) -> fp32 [N, E]");
  return a;
}

void ExpertLoadArgs::encode(OpCall& op) const {
  op.iargs = {layers, experts};
  op.iargs.insert(op.iargs.end(), divisors.begin(), divisors.end());
  op.fargs = {coeff};
}

ExpertLoadArgs ExpertLoadArgs::decode(const OpCall& op) {
  check_table_arity(op);
  FULLSHARD_CHECK(op.iargs.size() >= 2 && op.iargs[0] >= 1 && op.iargs[1] >= 1 &&
                      op.iargs.size() == static_cast<size_t>(2 + op.iargs[0]) &&
                      op.fargs.size() == 1,
                  op_where(op) + "needs iargs = {layers, experts, a divisor per layer}, fargs = "
                                 "{coeff}");
  ExpertLoadArgs a;
  a.layers = op.iargs[0];
  a.experts = op.iargs[1];
  a.divisors.assign(op.iargs.begin() + 2, op.iargs.end());
  a.coeff = op.fargs[0];
  for (int64_t d : a.divisors) FULLSHARD_CHECK(d >= 1, op_where(op) + "has a divisor below 1");
  const size_t L = static_cast<size_t>(a.layers);
  auto vec = [&](const TensorMeta& m) { return m.numel() == a.experts && m.dtype == DType::kFloat32; };
  const bool stack = op.kind == OpKind::kExpertLoadStack;
  const TensorMeta& loads = stack ? op.outputs[0].meta : op.inputs[0].meta;
  bool ok = loads.numel() == a.layers * a.experts && loads.dtype == DType::kFloat32;
  if (stack) {
    ok = ok && op.inputs.size() == L && op.outputs.size() == 1;
    for (const TensorRef& t : op.inputs) ok = ok && vec(t.meta);
  } else {
    ok = ok && op.inputs.size() == 1 + 2 * L && op.outputs.size() == 2 * L;
    for (size_t i = 1; ok && i < op.inputs.size(); ++i)
      ok = vec(op.inputs[i].meta) && op.inputs[i].buffer_id == op.outputs[i - 1].buffer_id &&
           op.inputs[i].offset_bytes == op.outputs[i - 1].offset_bytes;
  }
  FULLSHARD_CHECK(ok, op_where(op) + (stack ? "expects L fp32 [E] -> fp32 [L, E]"
                                            : "expects (fp32 [L, E], L biases, L token counts) "
                                              "-> the L biases and counts, in place"));
  return a;
}

AuxLossArgs AuxLossArgs::decode(const OpCall& op) {
  check_table_arity(op);
  FULLSHARD_CHECK(op.iargs.size() == 2 && op.iargs[0] >= 0 && op.iargs[1] >= 1 &&
                      op.fargs.size() == 1,
                  op_where(op) + "needs iargs = {tokens, experts}, fargs = {value}");
  const AuxLossArgs a{op.iargs[0], op.iargs[1], op.fargs[0]};
  auto f32 = [](const TensorMeta& m, int64_t n) {
    return m.dtype == DType::kFloat32 && m.numel() == n;
  };
  auto same = [](const TensorRef& a, const TensorRef& b) {
    return a.buffer_id == b.buffer_id && a.offset_bytes == b.offset_bytes;
  };
  const int64_t N = a.tokens, E = a.experts;
  const auto& in = op.inputs;
  const auto& out = op.outputs;
  bool ok = false;
  switch (op.kind) {
    case OpKind::kAddSumRows:
      ok = f32(in[0].meta, N * E) && f32(in[1].meta, E) && same(in[1], out[0]);
      break;
    case OpKind::kMoeAuxLoss:
      ok = f32(in[0].meta, E) && f32(in[1].meta, E) && f32(in[2].meta, 1) && same(in[2], out[0]);
      break;
    default:  // kMoeAuxLossBackward
      ok = f32(in[0].meta, N * E) && f32(in[1].meta, E) && f32(out[0].meta, N * E);
  }
  FULLSHARD_CHECK(ok, op_where(op) + "expects fp32 tensors: (scores [N, E], acc [E]) -> acc; "
                                     "(counts [E], probs [E], loss [1]) -> loss; (g [N, E], "
                                     "counts [E]) -> [N, E]");
  return a;
}

RowIndexArgs RowIndexArgs::decode(const OpCall& op) {
  check_table_arity(op);
  FULLSHARD_CHECK(op.iargs.size() >= 3 && op.iargs[0] >= 0 && op.iargs[1] >= 1 && op.iargs[2] >= 1,
                  op_where(op) + "needs iargs = {rows, width >= 1, divisor >= 1}");
  const RowIndexArgs a{op.iargs[0], op.iargs[1], op.iargs[2]};
  const TensorMeta& x = op.inputs[0].meta;
  const TensorMeta& y = op.outputs[0].meta;
  auto want = [&](bool ok, const char* what) { FULLSHARD_CHECK(ok, op_where(op) + what); };
  auto is_index = [](DType d) { return d == DType::kInt64; };
  switch (op.kind) {
    case OpKind::kArgsort:
    case OpKind::kFloorDivide:
      want(x.dtype == DType::kInt64 && y.dtype == DType::kInt64 && x.numel() == y.numel(),
           "expects int64 in and out of one size");
      break;
    case OpKind::kGatherRows: {
      const TensorMeta& idx = op.inputs[1].meta;
      want(is_index(idx.dtype) && x.numel() == a.rows * a.width &&
               y.numel() == idx.numel() * a.width,
           "expects (x [rows, width], index [M]) -> [M, width]");
      want(x.dtype == y.dtype, "copies rows bit for bit, but its input and output dtypes differ");
      break;
    }
    case OpKind::kScatterRows:
    case OpKind::kIndexAddRows: {
      const TensorMeta& idx = op.inputs[1].meta;
      want(is_index(idx.dtype) && x.numel() == idx.numel() * a.width &&
               y.numel() == a.rows * a.width,
           "expects (src [M, width], index [M]) -> [rows, width]");
      if (op.kind == OpKind::kScatterRows)
        want(x.dtype == y.dtype, "copies rows bit for bit, but its input and output dtypes differ");
      else
        expect_floating(op, op.inputs, "input", {0}), expect_floating(op, op.outputs, "output", {0});
      break;
    }
    case OpKind::kPadRow:
      want(x.numel() == a.rows * a.width && y.numel() >= x.numel() && y.numel() % a.width == 0,
           "expects x [rows, width] -> [rows + pad, width]");
      want(x.dtype == y.dtype, "copies rows bit for bit, but its input and output dtypes differ");
      break;
    default: want(false, "is not a row-index op");
  }
  return a;
}

int64_t PermuteIndicesArgs::padded_rows() const {
  const int64_t n = tokens + experts * align;
  return (n + align - 1) / align * align;
}

PermuteIndicesArgs PermuteIndicesArgs::decode(const OpCall& op) {
  check_arity(op, 1, 2);
  FULLSHARD_CHECK(op.iargs.size() >= 3 && op.iargs[0] >= 0 && op.iargs[1] >= 1 && op.iargs[2] >= 1,
                  op_where(op) + "needs iargs = {tokens, experts, align}");
  const PermuteIndicesArgs a{op.iargs[0], op.iargs[1], op.iargs[2]};
  FULLSHARD_CHECK(
      op.inputs[0].meta.numel() >= a.experts && op.inputs[0].meta.numel() % a.experts == 0 &&
          op.outputs[0].meta.numel() == a.padded_rows() &&
          op.outputs[0].meta.dtype == DType::kInt64 && op.outputs[1].meta.numel() == a.experts &&
          op.outputs[1].meta.dtype == DType::kInt64,
      op_where(op) +
          "expects counts [ranks * E] -> (int64 permutation [padded_rows], int64 "
          "offsets [E])");
  expect_floating(op, op.inputs, "input", {0});
  return a;
}

GroupedMmArgs GroupedMmArgs::decode(const OpCall& op) {
  check_arity(op, 3, 1);
  FULLSHARD_CHECK(op.iargs.size() >= 5 && op.iargs[0] >= 0 && op.iargs[1] >= 1 &&
                      op.iargs[2] >= 1 && op.iargs[3] >= 1 && op.iargs[4] >= 0 &&
                      op.iargs[4] <= op.iargs[0],
                  op_where(op) + "needs iargs = {rows, k, n, experts, computed_rows <= rows}");
  const GroupedMmArgs a{op.iargs[0], op.iargs[1], op.iargs[2], op.iargs[3], op.iargs[4]};
  const int64_t w = a.experts * a.n * a.k;
  const TensorMeta &i0 = op.inputs[0].meta, &i1 = op.inputs[1].meta, &offs = op.inputs[2].meta;
  const TensorMeta& y = op.outputs[0].meta;
  bool ok = offs.numel() == a.experts && offs.dtype == DType::kInt64;
  switch (op.kind) {
    case OpKind::kGroupedMM:
      ok = ok && i0.numel() == a.rows * a.k && i1.numel() == w && y.numel() == a.rows * a.n;
      break;
    case OpKind::kGroupedMMBackwardInput:
      ok = ok && i0.numel() == a.rows * a.n && i1.numel() == w && y.numel() == a.rows * a.k;
      break;
    case OpKind::kGroupedMMBackwardWeight:
      ok = ok && i0.numel() == a.rows * a.n && i1.numel() == a.rows * a.k && y.numel() == w;
      break;
    default: ok = false;
  }
  FULLSHARD_CHECK(ok, op_where(op) + "operand sizes do not match {rows, k, n, experts}");
  expect_floating(op, op.inputs, "input", {0, 1});
  expect_floating(op, op.outputs, "output", {0});
  return a;
}

}  // namespace fullshard
