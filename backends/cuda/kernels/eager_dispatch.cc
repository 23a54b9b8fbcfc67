// launch_eager: the eager decompositions' arguments and operand layout, decoded by the same
// argument structs as the CPU kernels (core/runtime/eager_args.h, rope_args.h,
// repeat_kv_args.h), then one launcher of eager.cu. Operands must be fp32, bf16 or
// fp16 (the CPU's load_f32 / store_f32 throw on anything else). Everything is checked before
// anything is enqueued.
#include <string>

#include "backends/cuda/kernels/eager_launchers.h"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"
#include "core/runtime/eager_args.h"
#include "core/runtime/op_args.h"
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
  const int64_t n = decode_unary(op);  // core/runtime/op_args.h
  expect_floats(op);
  launch::scalar_op(k, in[0], dt_in(op, 0), out[0], dt_out(op, 0), n, f, s);
}

void pow_scalar(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  const auto p = static_cast<float>(ScalarArgs::decode(op).value);
  const launch::Scalar k = p == 1.0f   ? launch::Scalar::kPow1
                           : p == 2.0f ? launch::Scalar::kPow2
                           : p == 3.0f ? launch::Scalar::kPow3
                                       : launch::Scalar::kPow;
  scalar(k, op, in, out, p, s);
}

void mul_broadcast(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  const MulBroadcastArgs m = MulBroadcastArgs::decode(op);  // core/runtime/eager_args.h
  expect_floats(op);
  const Bcast b = m.mode == MulBroadcastArgs::kPerHead     ? Bcast::kHead
                  : m.mode == MulBroadcastArgs::kPerColumn ? Bcast::kColumn
                                                           : Bcast::kRow;
  launch::mul_broadcast(b, in[0], dt_in(op, 0), in[1], dt_in(op, 1), out[0], dt_out(op, 0), m.rows,
                        m.dim, m.head_dim, s);
}

void sum_leading_dims(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  const RowArgs r = RowArgs::decode(op);  // core/runtime/eager_args.h
  expect_floats(op);
  // Column sums in double, rounded to fp32 then to y's dtype, as the CPU (norm.cu).
  launch::column_sum(in[0], dt_in(op, 0), out[0], dt_out(op, 0), r.rows, r.dim, s);
}

void expand_last_dim(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  const RowArgs r = RowArgs::decode(op);  // core/runtime/eager_args.h
  expect_floats(op);
  launch::expand_last_dim(in[0], dt_in(op, 0), out[0], dt_out(op, 0), r.rows, r.dim,
                          static_cast<float>(r.scale), s);
}

// rope.cc rope_inv_freq (NOTE [RoPE in fp32], NOTE [Llama 3 RoPE scaling]): the host computes
// the frequencies once per launch, bit for bit as the CPU kernels do, plain or scaled.
launch::RopeFreqs rope_freqs(const OpCall& op, const RopeParams& rope, int64_t hd) {
  FULLSHARD_CHECK(hd / 2 <= launch::kMaxEagerRopePairs,
                  where(op) + "head_dim " + std::to_string(hd) + " is over " +
                      std::to_string(2 * launch::kMaxEagerRopePairs) +
                      ", the CUDA RoPE kernels' limit");
  const std::vector<float> inv = rope_inv_freq(rope, hd);
  launch::RopeFreqs f{};
  for (size_t i = 0; i < inv.size(); ++i) f.inv[i] = inv[i];
  return f;
}

void rotary_cos_sin(const OpCall& op, const Ptrs& out, cudaStream_t s) {
  const RotaryCosSinArgs r = RotaryCosSinArgs::decode(op);  // core/runtime/rope_args.h
  expect_floats(op);
  const launch::RopeFreqs f = rope_freqs(op, r.rope, r.head_dim);
  launch::rotary_cos_sin(out[0], dt_out(op, 0), out[1], dt_out(op, 1), r.rows, r.seq, r.head_dim, f,
                         s);
}

void repeat_kv(const OpCall& op, const Ptrs& in, const Ptrs& out, bool backward, cudaStream_t s) {
  const RepeatKvArgs l = RepeatKvArgs::decode(op);  // the CPU kernel's decoding and checks
  expect_floats(op);
  if (!backward)
    return launch::repeat_kv(in[0], dt_in(op, 0), out[0], dt_out(op, 0), l.rows, l.kv_heads,
                             l.n_rep, l.head_dim, s);
  launch::repeat_kv_backward(in[0], dt_in(op, 0), out[0], dt_out(op, 0), l.rows, l.kv_heads,
                             l.n_rep, l.head_dim, s);
}

void rotate_half_cat(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  const RotateHalfCatArgs r = RotateHalfCatArgs::decode(op);  // core/runtime/rope_args.h
  expect_floats(op);
  launch::rotate_half_cat(in[0], dt_in(op, 0), in[1], dt_in(op, 1), out[0], dt_out(op, 0), r.blocks,
                          r.head_dim, s);
}

}  // namespace

void launch_eager(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out,
                  cudaStream_t s) {
  switch (op.kind) {
    case OpKind::kPowScalar: return pow_scalar(op, in, out, s);
    case OpKind::kAddScalar:
      return scalar(launch::Scalar::kAdd, op, in, out,
                    static_cast<float>(ScalarArgs::decode(op).value), s);
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
