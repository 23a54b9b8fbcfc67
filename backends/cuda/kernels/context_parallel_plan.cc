#include "backends/cuda/kernels/context_parallel_plan.h"

#include <algorithm>
#include <string>

#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"
#include "core/runtime/attention_args.h"
#include "core/runtime/context_parallel_args.h"

namespace fullshard::cuda::plan {
namespace {

RingAttnLayout ring_common(const OpCall& op, bool backward) {
  FULLSHARD_CHECK(op.kind == (backward ? OpKind::kAttentionBackward : OpKind::kAttention),
                  where(op) + "a ring-attention round runs the flash kinds only");
  const AttentionArgs a = AttentionArgs::decode(op);  // core/runtime/attention_args.h
  FULLSHARD_CHECK(a.ring() && !a.packed, where(op) + "is not a ring-attention round");
  FULLSHARD_CHECK(a.head_dim > 0 && a.head_dim <= 256,
                  where(op) + "head_dim " + std::to_string(a.head_dim) + " is not in 1..256");
  FULLSHARD_CHECK(a.batch * a.heads <= 65535,
                  where(op) + "batch x heads " + std::to_string(a.batch * a.heads) +
                      " is above CUDA's 65535 blocks in grid dimension y");
  RingAttnLayout l;
  l.B = a.batch, l.Sq = a.seq, l.Skv = a.kv_rows(), l.H = a.heads, l.Hkv = a.kv_heads;
  l.hd = a.head_dim, l.group = a.group, l.q_ld = a.q_ld, l.kv_ld = a.kv_ld;
  l.q_bs = a.q_stride_rows() * a.q_ld, l.kv_bs = a.kv_stride_rows() * a.kv_ld;
  l.lse_ld = a.lse_len, l.causal = a.causal, l.scale = a.scale;
  l.sd_ld = round_up(l.Sq, 128);
  const size_t first = backward ? 1 : 0;
  expect_numel(op, op.inputs[first].meta, l.B * l.Sq * l.q_ld, "q");
  expect_numel(op, op.inputs[first + 1].meta, l.B * l.Skv * l.kv_ld, "k");
  expect_numel(op, op.inputs[first + 2].meta, l.B * l.Skv * l.kv_ld, "v");
  const DType dt = op.inputs[first].meta.dtype;
  FULLSHARD_CHECK(is_float(dt) && op.inputs[first + 1].meta.dtype == dt &&
                      op.inputs[first + 2].meta.dtype == dt,
                  where(op) + "q, k and v must share a floating dtype");
  return l;
}

}  // namespace

bool is_ring_attention(const OpCall& op) {
  if (op.kind != OpKind::kAttention && op.kind != OpKind::kAttentionBackward) return false;
  return AttentionArgs::decode(op).ring();
}

RingAttnLayout plan_ring_attention(const OpCall& op) {
  expect_arity(op, 3, 2);
  RingAttnLayout l = ring_common(op, false);
  expect_numel(op, op.outputs[0].meta, l.B * l.Sq * l.H * l.hd, "o");
  expect_numel(op, op.outputs[1].meta, l.B * l.H * l.lse_ld, "logsumexp");
  FULLSHARD_CHECK(is_float(op.outputs[0].meta.dtype) && op.outputs[1].meta.dtype == DType::kFloat32,
                  where(op) + "o must be floating and logsumexp fp32");
  return l;
}

RingAttnLayout plan_ring_attention_backward(const OpCall& op) {
  RingAttnLayout l = ring_common(op, true);
  const bool gqa = l.H != l.Hkv;
  expect_arity(op, 6, gqa ? 7 : 5);  // NOTE [Flash attention backward temporaries]
  const int64_t D = l.H * l.hd, Dkv = l.Hkv * l.hd;
  expect_numel(op, op.inputs[0].meta, l.B * l.Sq * D, "dO");
  expect_numel(op, op.inputs[4].meta, l.B * l.Sq * D, "O");
  expect_numel(op, op.inputs[5].meta, l.B * l.H * l.lse_ld, "logsumexp");
  expect_numel(op, op.outputs[0].meta, l.B * l.Sq * D, "dq");
  expect_numel(op, op.outputs[1].meta, l.B * l.Skv * Dkv, "dk");
  expect_numel(op, op.outputs[2].meta, l.B * l.Skv * Dkv, "dv");
  FULLSHARD_CHECK(is_float(op.inputs[0].meta.dtype) && is_float(op.inputs[4].meta.dtype) &&
                      op.inputs[5].meta.dtype == DType::kFloat32,
                  where(op) + "dO and O must be floating and logsumexp fp32");
  for (size_t i = 0; i < 3; ++i)
    FULLSHARD_CHECK(is_float(op.outputs[i].meta.dtype), where(op) + "grads must be floating");
  FULLSHARD_CHECK(op.outputs[3].meta.dtype == DType::kFloat32 &&
                      op.outputs[3].meta.numel() >= l.B * l.H * l.sd_ld,
                  where(op) + "softmax_d must be fp32 [B, H, round128(S)]");
  return l;
}

SdpaMergePlan plan_sdpa_merge(const OpCall& op) {
  const SdpaMergeArgs a = SdpaMergeArgs::decode(op);  // core/runtime/context_parallel_args.h
  const DType bd = op.inputs[2].meta.dtype;
  FULLSHARD_CHECK(is_float(bd), where(op) + "block_out must be floating");
  SdpaMergePlan p;
  p.batch = a.batch, p.len = a.len, p.heads = a.heads, p.head_dim = a.head_dim;
  p.block_len = a.block_len, p.first_row = a.partial ? a.len - a.block_len : 0;
  p.block_dtype = dcode(bd);
  return p;
}

SeqRowsPlan plan_seq_rows_add(const OpCall& op) {
  const SeqRowsArgs a = SeqRowsArgs::decode(op);
  const DType dd = op.outputs[0].meta.dtype, sd = op.inputs[1].meta.dtype;
  FULLSHARD_CHECK(is_float(dd) && is_float(sd) && op.inputs[0].meta.dtype == dd,
                  where(op) + "dst and src must be floating, dst in place");
  return {a.batch, a.rows, a.begin, a.n, a.width, dcode(dd), dcode(sd)};
}

unsigned ring_grid(int64_t rows) {
  const int64_t g = (std::max<int64_t>(rows, 1) + kRingWarps - 1) / kRingWarps;
  return static_cast<unsigned>(std::min<int64_t>(g, kMaxGrid));
}

}  // namespace fullshard::cuda::plan
