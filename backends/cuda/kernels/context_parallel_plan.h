#pragma once
// Host-side planning of context parallelism's kernels on the CUDA backend (context_parallel.cu):
// the ring-attention rounds' layouts, kSdpaMerge and kSeqRowsAdd. Plain C++, testable without a
// GPU (tests/gpu/cuda_context_parallel_plan_test.cc); every function throws InternalError naming
// the op on operands it cannot run.
//
// NOTE [Ring attention on the CUDA backend]: a ring round after the first (AttentionArgs::ring():
// kv_seq keys, no causal mask, q / dO / O and k / v as strided halves of the local sequence; NOTE
// [Ring attention rounds] in core/runtime/cp_layout.h) runs SIMT kernels of its own, fp32 math on
// the stored dtype, with the CPU backend's maths (backends/cpu/kernels/attention.cc): the forward
// gives O (contiguous) and the row logsumexp; the backward recomputes P = exp(scale q k^T - lse)
// and writes dq (one warp per query row, its delta = rowsum(dO O) into softmax_d) and dk / dv (one
// warp per key row, over the query rows of its GQA group's heads), contiguous. No atomics: every
// output element has one writer, so results are deterministic. Round 0 (causal, the local chunks,
// unstrided) is ordinary attention and runs the flash kernels. The efficient and cuDNN kinds are
// refused under cp by the scenario. These kernels are for correctness first: they have not run on
// a GPU yet (docs/context-parallel.md).
#include <cstdint>

#include "backends/cuda/kernels/index_math.h"
#include "core/runtime/op.h"

namespace fullshard::cuda {

struct RingAttnLayout {
  int64_t B = 0, Sq = 0, Skv = 0, H = 0, Hkv = 0, hd = 0, group = 1;
  int64_t q_ld = 0, kv_ld = 0;  // elements per token row: q (dO, O) and k / v
  int64_t q_bs = 0, kv_bs = 0;  // elements from one batch's first row to the next's
  int64_t lse_ld = 0;           // logsumexp row length (>= Sq)
  int64_t sd_ld = 0;            // backward: softmax_d row length (round128(Sq))
  bool causal = false;
  float scale = 1;
};
// q (dO and O in a backward), k, v: strided views; outputs o, dq, dk, dv contiguous.
FS_HD int64_t ring_q_index(const RingAttnLayout& l, int64_t b, int64_t s, int64_t h) {
  return b * l.q_bs + s * l.q_ld + h * l.hd;
}
FS_HD int64_t ring_kv_index(const RingAttnLayout& l, int64_t b, int64_t s, int64_t kvh) {
  return b * l.kv_bs + s * l.kv_ld + kvh * l.hd;
}
FS_HD int64_t ring_out_index(const RingAttnLayout& l, int64_t b, int64_t s, int64_t h) {
  return (b * l.Sq + s) * (l.H * l.hd) + h * l.hd;
}
FS_HD int64_t ring_kv_out_index(const RingAttnLayout& l, int64_t b, int64_t s, int64_t kvh) {
  return (b * l.Skv + s) * (l.Hkv * l.hd) + kvh * l.hd;
}
FS_HD int64_t ring_lse_index(const RingAttnLayout& l, int64_t b, int64_t h, int64_t s) {
  return (b * l.H + h) * l.lse_ld + s;
}

// kSdpaMerge (SdpaMergeArgs): the block's rows are [first_row, first_row + block_len) of each
// batch of the running output.
struct SdpaMergePlan {
  int64_t batch = 0, len = 0, heads = 0, head_dim = 0, block_len = 0, first_row = 0;
  int block_dtype = 0;  // DCode of block_out (the others are fp32)
};

namespace plan {

// kAttention / kAttentionBackward with a ring round's arguments (AttentionArgs::ring()).
bool is_ring_attention(const OpCall& op);
RingAttnLayout plan_ring_attention(const OpCall& op);  // (q, k, v) -> (o, lse)
// (dO, q, k, v, O, lse) -> (dq, dk, dv, softmax_d, dq_accum[, dk_expanded, dv_expanded])
RingAttnLayout plan_ring_attention_backward(const OpCall& op);
SdpaMergePlan plan_sdpa_merge(const OpCall& op);
// kSeqRowsAdd: its SeqRowsArgs after the dtype checks (dst and src floating).
struct SeqRowsPlan {
  int64_t batch = 0, rows = 0, begin = 0, n = 0, width = 0;
  int dst_dtype = 0, src_dtype = 0;
};
SeqRowsPlan plan_seq_rows_add(const OpCall& op);
// Threads per block of the ring kernels (a warp per row) and their grid over `rows` rows.
constexpr unsigned kRingWarps = 4;
unsigned ring_grid(int64_t rows);

}  // namespace plan
}  // namespace fullshard::cuda
