// launch_eager: the eager decompositions' operand checks, decoded exactly as the CPU kernels
// decode them (backends/cpu/kernels/eager.cc, rope.cc: the same iargs / fargs, sizes and
// messages, in the same order), then one launcher of eager.cu. Operands must be fp32, bf16 or
// fp16 (the CPU's load_f32 / store_f32 throw on anything else). Everything is checked before
// anything is enqueued.
#include <string>

#include "backends/cuda/kernels/eager_launchers.h"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"
#include "core/runtime/eager_args.h"
#include "core/runtime/repeat_kv_args.h"
#include "core/runtime/rope_args.h"

namespace fullshard::cuda {

namespace {

using namespace plan;
using Ptrs = std::vector<void*>;

int dt_in(const OpCall& op, size_t i) { return dcode(op.inputs[i].meta.dtype); }
int dt_out(const OpCall& op, size_t i) { return dcode(op.outputs[i].meta.dtype); }
void expect_floats(const OpCall& op) {
  for (const auto& r : op.inputs)
    FULLSHARD_CHECK(is_float(r.meta.dtype), where(op) + "operand must be fp32, bf16 or fp16, got " +
                                                std::string(dtype_name(r.meta.dtype)));
  for (const auto& r : op.outputs)
    FULLSHARD_CHECK(is_float(r.meta.dtype), where(op) + "output must be fp32, bf16 or fp16, got " +
                                                std::string(dtype_name(r.meta.dtype)));
}

// eager.cc map1: one input, one output of its size.
void scalar(launch::Scalar k, const OpCall& op, const Ptrs& in, const Ptrs& out, float f,
            cudaStream_t s) {
  expect_arity(op, 1, 1);
  const TensorMeta &x = op.inputs[0].meta, &y = op.outputs[0].meta;
  FULLSHARD_CHECK(x.numel() == y.numel(), where(op) + "output size differs from the input");
  expect_floats(op);
  launch::scalar_op(k, in[0], dt_in(op, 0), out[0], dt_out(op, 0), x.numel(), f, s);
}

void pow_scalar(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  const auto p = static_cast<float>(eager_farg(op));
  const launch::Scalar k = p == 1.0f   ? launch::Scalar::kPow1
                           : p == 2.0f ? launch::Scalar::kPow2
                           : p == 3.0f ? launch::Scalar::kPow3
                                       : launch::Scalar::kPow;
  scalar(k, op, in, out, p, s);
}

void mul_broadcast(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  expect_arity(op, 2, 1);
  FULLSHARD_CHECK(op.iargs.size() >= 2, where(op) + "needs iargs = {per_column, D}");
  const TensorMeta &a = op.inputs[0].meta, &bm = op.inputs[1].meta, &y = op.outputs[0].meta;
  const int64_t mode = op.iargs[0];
  const bool per_col = mode == 1;
  const int64_t D = op.iargs[1];
  FULLSHARD_CHECK(D > 0 && a.numel() % D == 0 && y.numel() == a.numel(),
                  where(op) + "a and out must be [rows, D]");
  const int64_t rows = a.numel() / D;
  const int64_t hd = mode == 2 && op.iargs.size() >= 3 ? op.iargs[2] : 0;
  FULLSHARD_CHECK(mode != 2 || (hd > 0 && D % hd == 0),
                  where(op) + "mode 2 needs iargs[2] = head_dim dividing D");
  FULLSHARD_CHECK(
      bm.numel() == (mode == 2 ? rows * hd
                     : per_col ? D
                               : rows),
      where(op) + "b must be [D] (per column), [rows] (per row) or [rows, head_dim] (per head)");
  expect_floats(op);
  // Any mode other than 1 and 2 is per row, as on the CPU.
  const Bcast m = mode == 2 ? Bcast::kHead : per_col ? Bcast::kColumn : Bcast::kRow;
  launch::mul_broadcast(m, in[0], dt_in(op, 0), in[1], dt_in(op, 1), out[0], dt_out(op, 0), rows, D,
                        hd, s);
}

void sum_leading_dims(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  expect_arity(op, 1, 1);
  const TensorMeta &x = op.inputs[0].meta, &y = op.outputs[0].meta;
  const int64_t D = eager_row_width(op, x), rows = x.numel() / D;
  FULLSHARD_CHECK(y.numel() == D, where(op) + "output must be [D]");
  expect_floats(op);
  // Column sums in double, rounded to fp32 then to y's dtype, as the CPU (norm.cu).
  launch::column_sum(in[0], dt_in(op, 0), out[0], dt_out(op, 0), rows, D, s);
}

void expand_last_dim(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  expect_arity(op, 1, 1);
  const TensorMeta &x = op.inputs[0].meta, &y = op.outputs[0].meta;
  const int64_t D = eager_row_width(op, y), rows = y.numel() / D;
  FULLSHARD_CHECK(x.numel() == rows, where(op) + "input must have one element per output row");
  const auto scale = static_cast<float>(eager_farg(op));
  expect_floats(op);
  launch::expand_last_dim(in[0], dt_in(op, 0), out[0], dt_out(op, 0), rows, D, scale, s);
}

// rope.cc rope_inv_freq (NOTE [RoPE in fp32], NOTE [Llama 3 RoPE scaling]): the host computes
// the frequencies once per launch, bit for bit as the CPU kernels do, plain or scaled.
launch::RopeFreqs rope_freqs(const OpCall& op, int64_t hd) {
  FULLSHARD_CHECK(hd / 2 <= launch::kMaxEagerRopePairs,
                  where(op) + "head_dim " + std::to_string(hd) + " is over " +
                      std::to_string(2 * launch::kMaxEagerRopePairs) +
                      ", the CUDA RoPE kernels' limit");
  FULLSHARD_CHECK(
      op.fargs.size() == 1 || op.fargs.size() == 5,
      where(op) + "fargs must be {theta} or {theta, factor, low, high, original} (RopeParams)");
  const std::vector<float> inv = rope_inv_freq(RopeParams::from_fargs(op.fargs), hd);
  launch::RopeFreqs f{};
  for (size_t i = 0; i < inv.size(); ++i) f.inv[i] = inv[i];
  return f;
}

void rotary_cos_sin(const OpCall& op, const Ptrs& out, cudaStream_t s) {
  expect_arity(op, 0, 2);
  FULLSHARD_CHECK(!op.iargs.empty() && !op.fargs.empty(),
                  where(op) + "needs iargs[0] = head_dim, fargs[0] = theta");
  const TensorMeta &c = op.outputs[0].meta, &sn = op.outputs[1].meta;
  const int64_t hd = op.iargs[0];
  // hd > 0 beyond the CPU's checks: it divides by hd.
  FULLSHARD_CHECK(c.shape.size() >= 2 && c.shape.back() == hd && hd > 0 && hd % 2 == 0 &&
                      sn.numel() == c.numel(),
                  where(op) + "cos and sin must be [B, S, head_dim] with an even head_dim");
  expect_floats(op);
  const launch::RopeFreqs f = rope_freqs(op, hd);
  const int64_t S = c.shape[c.shape.size() - 2], rows = c.numel() / hd;
  launch::rotary_cos_sin(out[0], dt_out(op, 0), out[1], dt_out(op, 1), rows, S, hd, f, s);
}

void repeat_kv(const OpCall& op, const Ptrs& in, const Ptrs& out, bool backward, cudaStream_t s) {
  const RepeatKvLayout l = decode_repeat_kv(op);  // the CPU kernel's decoding and checks
  expect_floats(op);
  if (!backward)
    return launch::repeat_kv(in[0], dt_in(op, 0), out[0], dt_out(op, 0), l.rows, l.kv_heads,
                             l.n_rep, l.head_dim, s);
  launch::repeat_kv_backward(in[0], dt_in(op, 0), out[0], dt_out(op, 0), l.rows, l.kv_heads,
                             l.n_rep, l.head_dim, s);
}

void rotate_half_cat(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  expect_arity(op, 2, 1);
  FULLSHARD_CHECK(!op.iargs.empty(), where(op) + "needs iargs[0] = head_dim");
  const int64_t hd = op.iargs[0];
  const TensorMeta &n = op.inputs[0].meta, &x = op.inputs[1].meta, &y = op.outputs[0].meta;
  FULLSHARD_CHECK(hd > 0 && hd % 2 == 0 && x.numel() % hd == 0 && n.numel() * 2 == x.numel() &&
                      y.numel() == x.numel(),
                  where(op) + "expects -x2 [.., hd/2], x [.., hd] and out [.., hd]");
  expect_floats(op);
  launch::rotate_half_cat(in[0], dt_in(op, 0), in[1], dt_in(op, 1), out[0], dt_out(op, 0),
                          x.numel() / hd, hd, s);
}

}  // namespace

void launch_eager(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out,
                  cudaStream_t s) {
  switch (op.kind) {
    case OpKind::kPowScalar: return pow_scalar(op, in, out, s);
    case OpKind::kAddScalar:
      return scalar(launch::Scalar::kAdd, op, in, out, static_cast<float>(eager_farg(op)), s);
    case OpKind::kRsqrt: return scalar(launch::Scalar::kRsqrt, op, in, out, 0.0f, s);
    case OpKind::kMulBroadcast: return mul_broadcast(op, in, out, s);
    case OpKind::kSumLeadingDims: return sum_leading_dims(op, in, out, s);
    case OpKind::kExpandLastDim: return expand_last_dim(op, in, out, s);
    case OpKind::kRepeatKV: return repeat_kv(op, in, out, false, s);
    case OpKind::kRepeatKVBackward: return repeat_kv(op, in, out, true, s);
    case OpKind::kRotaryCosSin: return rotary_cos_sin(op, out, s);
    case OpKind::kRotateHalfCat: return rotate_half_cat(op, in, out, s);
    default: break;
  }
  FULLSHARD_CHECK(false, where(op) + "is not an eager-decomposition op");
}

}  // namespace fullshard::cuda
