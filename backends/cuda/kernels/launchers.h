#pragma once
// The device side's entry points: one host function per kernel family, implemented in the .cu
// files and called by dispatch.cc after plan.h has decoded and checked the op. Plain C++;
// pointers are device addresses, dtypes are DCode values, and every function only enqueues.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "backends/cuda/kernels/index_math.h"

namespace fullshard::cuda::launch {

// elementwise.cu
void copy2d_bytes(const Copy2D& bytes, const void* src, void* dst, int vec_bytes, cudaStream_t s);
void copy2d_cast(const Copy2D& c, const void* src, int sdt, void* dst, int ddt, int vec,
                 cudaStream_t s);
void fill(void* dst, int64_t nbytes, const unsigned char pattern[16], cudaStream_t s);
enum class Ew : int { kAdd, kMul, kScale, kSiLU, kSiLUBackward, kGELU, kGELUBackward };
// o = f(a[, b]) over n elements; `f` is kScale's factor. In place (o == a) is fine.
void elementwise(Ew op, const void* a, int da, const void* b, int db, void* o, int dout, int64_t n,
                 float f, cudaStream_t s);
// o_i = g_i * min(1, max_norm / (sqrt(*total) + 1e-6)) for every gradient (kClipGradScale; total
// read on the device), multi-tensor as NOTE [Multi-tensor AdamW]; o_i may be g_i.
struct ClipTensor {
  const void* g;
  void* o;
  int64_t n;
  int dg, dout;
};
void clip_scale(const void* total, int dtotal, float max_norm, const ClipTensor* tensors, int count,
                cudaStream_t s);
struct AdamScalars {
  float decay, w1, b2, w2, neg_step_size, bc2_sqrt, eps;
};
// One parameter's operands: param, grad, exp_avg, exp_avg_sq in; param, exp_avg, exp_avg_sq and
// (foreach only, else null) the denominator out; in place where an output is its input.
struct AdamTensor {
  const void *p, *g, *m, *v;
  void *po, *mo, *vo, *denom;
  int64_t n;
  int dp, dg, dm, dv, dpo, dmo, dvo, ddenom;
};
// NOTE [Multi-tensor AdamW] (elementwise.cu): every parameter in a few launches.
void adamw(const AdamScalars& a, const AdamTensor* tensors, int count, cudaStream_t s);

// rows.cu: embeddings, RoPE, norms, softmax / loss, reductions
// vocab_start: -1 for the whole table; else w holds rows [vocab_start, vocab_start + V) of a
// vocab-parallel table (other ids: zero rows, no gradient).
void embedding(const int64_t* ids, const void* w, int dw, void* y, int dy, int64_t n, int64_t V,
               int64_t D, int64_t vocab_start, cudaStream_t s);
void embedding_backward(const void* g, int dg, const int64_t* ids, void* gw, int dgw, int64_t n,
                        int64_t V, int64_t D, int64_t vocab_start, cudaStream_t s);
// p0: the first position (a tensor-parallel sequence shard's).
void position_embedding(const void* x, int dx, const void* wpe, int dw, void* y, int dy,
                        int64_t rows, int64_t S, int64_t D, int64_t p0, cudaStream_t s);
void position_embedding_backward(const void* g, int dg, void* gw, int dgw, int64_t batch, int64_t S,
                                 int64_t P, int64_t D, int64_t p0, cudaStream_t s);
void rms_norm(const void* x, int dx, const void* w, int dw, void* y, int dy, float* rstd,
              int64_t rows, int64_t D, double eps, cudaStream_t s);
void layer_norm(const void* x, int dx, const void* w, int dw, const void* b, int db, void* y,
                int dy, float* mean, float* rstd, int64_t rows, int64_t D, double eps,
                cudaStream_t s);
// mean == nullptr: RMSNorm (x-hat = x * rstd, no bias gradient).
// gx or gw may be null (the zero-bubble split's parts: kRMSNormBackwardInput / Weight); w is not
// read without gx.
void norm_backward(const void* g, int dg, const void* x, int dx, const float* mean,
                   const float* rstd, const void* w, int dw, void* gx, int dgx, void* gw, int dgw,
                   void* gb, int dgb, int64_t rows, int64_t D, cudaStream_t s);
void column_sum(const void* g, int dg, void* out, int dout, int64_t M, int64_t N, cudaStream_t s);
void log_softmax(const void* x, int dx, void* y, int dy, int64_t rows, int64_t V, cudaStream_t s);
void log_softmax_backward(const void* g, int dg, const void* y, int dy, void* gx, int dgx,
                          int64_t rows, int64_t V, cudaStream_t s);
// loss and total_weight are scalars of dtype dloss (the log-probs' dtype, as aten's nll_loss).
void nll_loss(const void* lp, int dlp, const int64_t* labels, void* loss, void* total_weight,
              int dloss, int64_t rows, int64_t V, int64_t ignore, cudaStream_t s);
void nll_loss_backward(const void* g, int dg, const int64_t* labels, const void* total_weight,
                       int dtw, void* glp, int dglp, int64_t rows, int64_t V, int64_t ignore,
                       cudaStream_t s);
// out[i] (dtype dout) = sum(t_i^2) or, with squares == false, sum(t_i), accumulated in double.
struct ReduceItem {
  const void* p;
  int64_t n;
  int dt;
};
void reduce_sums(const ReduceItem* items, int count, bool squares, void* out, int dout,
                 cudaStream_t s);
// NOTE [Chunked squared norms] (rows.cu): out[i] = sum(t_i^2) in two deterministic stages through
// partials [count x max_chunks] fp32 (_foreach_norm's scratch), a block per `chunk` elements.
void chunked_squared_norms(const ReduceItem* items, int count, int64_t chunk, float* partials,
                           int64_t max_chunks, void* out, int dout, cudaStream_t s);

// attention.cu (SIMT), attention_tc*.cu (WMMA), attention_fa2_*.cu (FlashAttention-2 on
// mma.sync). dispatch.cc picks the kernel (NOTE [Attention kernel choice]): kFa2 and kWmma need
// q, k, v (and dO in the backward) bf16 / fp16 of one dtype and 16-byte aligned bases, kFa2 a
// head_dim of fa2::supports_head_dim and (backward) the flash temporaries dq_accum and, with
// GQA, dk / dv expanded; kWmma head_dim 64 or 128; else the SIMT kernels run.
enum class AttnKernel { kSimt, kWmma, kFa2 };
void attention_forward(const AttnLayout& l, const void* q, const void* k, const void* v, int dqkv,
                       void* o, int dout, float* lse, AttnKernel kernel, cudaStream_t s);
struct AttnGrads {
  void *dq, *dk, *dv;
  int ddq, ddk, ddv;
  float* softmax_d;  // [B, H, softmax_d_ld]
  int64_t softmax_d_ld;
  // kFa2 only: dq_accum fp32 [B, dq_accum_rows, H, dq_accum_hd] and, when H != Hkv, dk / dv at
  // the query head count [B, S, H, hd] in dtype dd_expanded (NOTE [FlashAttention-2 backward]).
  float* dq_accum = nullptr;
  int64_t dq_accum_rows = 0, dq_accum_hd = 0;
  void *dk_expanded = nullptr, *dv_expanded = nullptr;
  int dd_expanded = 0;
};
void attention_backward(const AttnLayout& l, const void* dout, int ddout, const void* q,
                        const void* k, const void* v, int dqkv, const void* o, int dt_o,
                        const float* lse, const AttnGrads& g, AttnKernel kernel, cudaStream_t s);

// Shared memory per block the tensor-core attention kernels take at head_dim 64 or 128
// (attention_tc.cu, attention_tc_bwd.cu): dispatch.cc checks it against the device's opt-in
// limit. The FlashAttention-2 kernels' is fa2::fwd_smem_bytes / bwd_smem_bytes.
size_t attention_forward_tc_smem(int64_t hd);
size_t attention_backward_tc_smem(int64_t hd);

// Throws InternalError with the CUDA error string if the last launch failed to enqueue.
void check_launch(const char* what);

}  // namespace fullshard::cuda::launch
