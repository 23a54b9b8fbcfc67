// Causal GQA attention, SIMT path (any dtype, head_dim <= 256): flash-attention-2's algorithm
// with fp32 CUDA-core math. bf16 / fp16 run FlashAttention-2 on mma.sync (attention_fa2_*.cu,
// head_dim 32 / 64 / 80 / 96 / 128) or, with FULLSHARD_ATTENTION_KERNELS=wmma, the WMMA kernels
// (attention_tc*.cu, head_dim 64 / 128) instead; softmax_d is computed here for SIMT and WMMA.
// Layouts: index_math.h (AttnLayout) and docs/kernels.md.
//
// NOTE [SIMT flash attention]: a block owns 16 query rows (4 per warp) of one (batch, head) and
// walks the causal prefix of keys in tiles of 32 staged in shared memory as fp32; lane j scores
// key j of the tile, the warp's online softmax rescales the running output, and each lane owns
// the output dims lane, lane + 32, ... (8 registers per row for head_dim 256). The backward runs
// three kernels and no atomics: softmax_d = rowsum(dO * O) (into the op's softmax_d
// temporary), dq per query row over its keys, and dk / dv per key row over the later queries of
// every head of its kv group (summed in registers, so GQA needs no expanded dk / dv).
#include <cmath>

#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/plan.h"

namespace fullshard::cuda {
namespace {

using namespace dev;

constexpr int kWarps = 4, kRowsPerWarp = 4, kRows = kWarps * kRowsPerWarp;  // rows per block
constexpr int kTile = 32;       // keys (or queries) per tile
constexpr int kMaxDimRegs = 8;  // 256 / 32

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Stages `rows` token rows of hd elements (row t at element index idx(t)) as fp32 with row stride
// ld.
template <class Idx>
__device__ __forceinline__ void stage(float* dst, int ld, const void* src, int dt, int rows, int hd,
                                      Idx idx) {
  for (int e = threadIdx.x; e < rows * hd; e += blockDim.x) {
    const int t = e / hd, d = e - t * hd;
    const int64_t at = idx(t);
    dst[t * ld + d] = at >= 0 ? load_f(src, dt, at + d) : 0.0f;
  }
}

__global__ void attn_fwd_simt(AttnLayout l, const void* q, const void* k, const void* v, int dt,
                              void* o, int dout, float* lse) {
  extern __shared__ float smem[];
  const int hd = static_cast<int>(l.hd), ld = hd + 1;
  float* Qs = smem;             // [kRows][hd]
  float* Ks = Qs + kRows * hd;  // [kTile][ld]
  float* Vs = Ks + kTile * ld;  // [kTile][ld]
  const int64_t bh = blockIdx.y, b = bh / l.H, h = bh % l.H, kvh = h / l.group;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  stage(Qs, hd, q, dt, kRows, hd,
        [&](int t) { return q0 + t < l.S ? attn_q_index(l, b, q0 + t, h) : int64_t(-1); });

  float acc[kRowsPerWarp][kMaxDimRegs], m[kRowsPerWarp], sum[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    sum[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kMaxDimRegs; ++c) acc[r][c] = 0.0f;
  }
  const int64_t last = min(l.S, q0 + kRows);  // keys [0, last) can be visible to this block
  for (int64_t j0 = 0; j0 < last; j0 += kTile) {
    __syncthreads();
    stage(Ks, ld, k, dt, kTile, hd,
          [&](int t) { return j0 + t < l.S ? attn_k_index(l, b, j0 + t, kvh) : int64_t(-1); });
    stage(Vs, ld, v, dt, kTile, hd,
          [&](int t) { return j0 + t < l.S ? attn_v_index(l, b, j0 + t, kvh) : int64_t(-1); });
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r;
      const int64_t i = q0 + row, j = j0 + lane;
      if (i >= l.S || j0 > i) continue;  // uniform across the warp
      float s = -INFINITY;
      if (j <= i) {
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot += Qs[row * hd + d] * Ks[lane * ld + d];
        s = dot * l.scale;
      }
      const float m_new = fmaxf(m[r], warp_max(s));
      const float p = j <= i ? expf(s - m_new) : 0.0f;
      const float alpha = expf(m[r] - m_new);
      sum[r] = sum[r] * alpha + warp_sum(p);
      m[r] = m_new;
      const int valid = static_cast<int>(min(static_cast<int64_t>(kTile), i - j0 + 1));
#pragma unroll
      for (int c = 0; c < kMaxDimRegs; ++c) acc[r][c] *= alpha;
      for (int jj = 0; jj < valid; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
        for (int c = 0; c < kMaxDimRegs; ++c) {
          const int d = c * 32 + lane;
          if (d < hd) acc[r][c] += pj * Vs[jj * ld + d];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = q0 + warp * kRowsPerWarp + r;
    if (i >= l.S) continue;
    const float inv = 1.0f / sum[r];
    const int64_t oi = attn_o_index(l, b, i, h);
#pragma unroll
    for (int c = 0; c < kMaxDimRegs; ++c) {
      const int d = c * 32 + lane;
      if (d < hd) store_f(o, dout, oi + d, acc[r][c] * inv);
    }
    if (lane == 0) lse[attn_lse_index(l, b, h, i)] = m[r] + logf(sum[r]);
  }
}

// softmax_d[b, h, i] = sum_d dO * O (double, as attention.cc's delta); a warp per (token, head).
__global__ void attn_bwd_delta(AttnLayout l, const void* dout, int ddout, const void* o, int dto,
                               float* softmax_d, int64_t sd_ld) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t w = global_thread() / 32; w < l.B * l.S * l.H; w += warps) {
    const int64_t h = w % l.H, bs = w / l.H, b = bs / l.S, s = bs % l.S;
    const int64_t base = attn_o_index(l, b, s, h);
    double acc = 0;
    for (int64_t d = lane; d < l.hd; d += 32)
      acc += static_cast<double>(load_f(dout, ddout, base + d)) * load_f(o, dto, base + d);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) softmax_d[(b * l.H + h) * sd_ld + s] = static_cast<float>(acc);
  }
}

// dq_i = scale * sum_{j <= i} dS_ij k_j with dS = P * (dO_i . v_j - delta_i), P = exp(scale q.k -
// lse).
__global__ void attn_bwd_dq(AttnLayout l, const void* dout, int ddout, const void* q, const void* k,
                            const void* v, int dt, const float* lse, const float* softmax_d,
                            int64_t sd_ld, void* dq, int ddq) {
  extern __shared__ float smem[];
  const int hd = static_cast<int>(l.hd), ld = hd + 1;
  float* Qs = smem;             // [kRows][hd]
  float* Gs = Qs + kRows * hd;  // dO rows [kRows][hd]
  float* Ks = Gs + kRows * hd;  // [kTile][ld]
  float* Vs = Ks + kTile * ld;  // [kTile][ld]
  const int64_t bh = blockIdx.y, b = bh / l.H, h = bh % l.H, kvh = h / l.group;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  stage(Qs, hd, q, dt, kRows, hd,
        [&](int t) { return q0 + t < l.S ? attn_q_index(l, b, q0 + t, h) : int64_t(-1); });
  stage(Gs, hd, dout, ddout, kRows, hd,
        [&](int t) { return q0 + t < l.S ? attn_o_index(l, b, q0 + t, h) : int64_t(-1); });
  float acc[kRowsPerWarp][kMaxDimRegs], L[kRowsPerWarp], Dl[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = min(q0 + warp * kRowsPerWarp + r, l.S - 1);
    L[r] = lse[attn_lse_index(l, b, h, i)];
    Dl[r] = softmax_d[(b * l.H + h) * sd_ld + i];
#pragma unroll
    for (int c = 0; c < kMaxDimRegs; ++c) acc[r][c] = 0.0f;
  }
  const int64_t last = min(l.S, q0 + kRows);
  for (int64_t j0 = 0; j0 < last; j0 += kTile) {
    __syncthreads();
    stage(Ks, ld, k, dt, kTile, hd,
          [&](int t) { return j0 + t < l.S ? attn_k_index(l, b, j0 + t, kvh) : int64_t(-1); });
    stage(Vs, ld, v, dt, kTile, hd,
          [&](int t) { return j0 + t < l.S ? attn_v_index(l, b, j0 + t, kvh) : int64_t(-1); });
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r;
      const int64_t i = q0 + row, j = j0 + lane;
      if (i >= l.S || j0 > i) continue;
      float ds = 0.0f;
      if (j <= i) {
        float qk = 0.0f, dp = 0.0f;
        for (int d = 0; d < hd; ++d) {
          qk += Qs[row * hd + d] * Ks[lane * ld + d];
          dp += Gs[row * hd + d] * Vs[lane * ld + d];
        }
        const float p = expf(qk * l.scale - L[r]);
        ds = p * (dp - Dl[r]);
      }
      const int valid = static_cast<int>(min(static_cast<int64_t>(kTile), i - j0 + 1));
      for (int jj = 0; jj < valid; ++jj) {
        const float dsj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
        for (int c = 0; c < kMaxDimRegs; ++c) {
          const int d = c * 32 + lane;
          if (d < hd) acc[r][c] += dsj * Ks[jj * ld + d];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = q0 + warp * kRowsPerWarp + r;
    if (i >= l.S) continue;
    const int64_t oi = attn_o_index(l, b, i, h);  // dq is [B, S, H, hd] (q's compact layout)
#pragma unroll
    for (int c = 0; c < kMaxDimRegs; ++c) {
      const int d = c * 32 + lane;
      if (d < hd) store_f(dq, ddq, oi + d, acc[r][c] * l.scale);
    }
  }
}

// dk_j = scale * sum_h sum_{i >= j} dS_ij q_i, dv_j = sum_h sum_{i >= j} P_ij dO_i over the
// query heads h of kv head kvh. A block owns 16 key rows; lanes are query rows of a tile.
__global__ void attn_bwd_dkdv(AttnLayout l, const void* dout, int ddout, const void* q,
                              const void* k, const void* v, int dt, const float* lse,
                              const float* softmax_d, int64_t sd_ld, void* dk, int ddk, void* dv,
                              int ddv) {
  extern __shared__ float smem[];
  const int hd = static_cast<int>(l.hd), ld = hd + 1;
  float* Ks = smem;             // [kRows][hd]
  float* Vs = Ks + kRows * hd;  // [kRows][hd]
  float* Qs = Vs + kRows * hd;  // [kTile][ld]
  float* Gs = Qs + kTile * ld;  // [kTile][ld]
  float* Ls = Gs + kTile * ld;  // [kTile]
  float* Ds = Ls + kTile;       // [kTile]
  const int64_t bh = blockIdx.y, b = bh / l.Hkv, kvh = bh % l.Hkv;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  stage(Ks, hd, k, dt, kRows, hd,
        [&](int t) { return k0 + t < l.S ? attn_k_index(l, b, k0 + t, kvh) : int64_t(-1); });
  stage(Vs, hd, v, dt, kRows, hd,
        [&](int t) { return k0 + t < l.S ? attn_v_index(l, b, k0 + t, kvh) : int64_t(-1); });
  float gk[kRowsPerWarp][kMaxDimRegs], gv[kRowsPerWarp][kMaxDimRegs];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int c = 0; c < kMaxDimRegs; ++c) gk[r][c] = gv[r][c] = 0.0f;
  for (int64_t h = kvh * l.group; h < (kvh + 1) * l.group; ++h) {
    for (int64_t i0 = k0 / kTile * kTile; i0 < l.S; i0 += kTile) {
      __syncthreads();
      stage(Qs, ld, q, dt, kTile, hd,
            [&](int t) { return i0 + t < l.S ? attn_q_index(l, b, i0 + t, h) : int64_t(-1); });
      stage(Gs, ld, dout, ddout, kTile, hd,
            [&](int t) { return i0 + t < l.S ? attn_o_index(l, b, i0 + t, h) : int64_t(-1); });
      if (threadIdx.x < kTile) {
        const int64_t i = min(i0 + threadIdx.x, l.S - 1);
        Ls[threadIdx.x] = lse[attn_lse_index(l, b, h, i)];
        Ds[threadIdx.x] = softmax_d[(b * l.H + h) * sd_ld + i];
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int row = warp * kRowsPerWarp + r;
        const int64_t j = k0 + row, i = i0 + lane;
        if (j >= l.S || i0 + kTile - 1 < j) continue;  // no query of this tile sees key j
        float p = 0.0f, ds = 0.0f;
        if (i >= j && i < l.S) {
          float qk = 0.0f, dp = 0.0f;
          for (int d = 0; d < hd; ++d) {
            qk += Qs[lane * ld + d] * Ks[row * hd + d];
            dp += Gs[lane * ld + d] * Vs[row * hd + d];
          }
          p = expf(qk * l.scale - Ls[lane]);
          ds = p * (dp - Ds[lane]);
        }
        for (int ii = 0; ii < kTile; ++ii) {
          const float pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
          for (int c = 0; c < kMaxDimRegs; ++c) {
            const int d = c * 32 + lane;
            if (d < hd) {
              gv[r][c] += pi * Gs[ii * ld + d];
              gk[r][c] += dsi * Qs[ii * ld + d];
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t j = k0 + warp * kRowsPerWarp + r;
    if (j >= l.S) continue;
    const int64_t oi = (b * l.S + j) * l.Hkv * l.hd + kvh * l.hd;  // dk / dv are [B, S, Hkv, hd]
#pragma unroll
    for (int c = 0; c < kMaxDimRegs; ++c) {
      const int d = c * 32 + lane;
      if (d < hd) {
        store_f(dk, ddk, oi + d, gk[r][c] * l.scale);
        store_f(dv, ddv, oi + d, gv[r][c]);
      }
    }
  }
}

size_t fwd_smem(int64_t hd) { return static_cast<size_t>(kRows * hd + 2 * kTile * (hd + 1)) * 4; }
size_t dq_smem(int64_t hd) {
  return static_cast<size_t>(2 * kRows * hd + 2 * kTile * (hd + 1)) * 4;
}
size_t dkdv_smem(int64_t hd) {
  return static_cast<size_t>(2 * kRows * hd + 2 * kTile * (hd + 1) + 2 * kTile) * 4;
}

template <class K>
void allow_smem(K kernel, size_t bytes) {
  // A failed opt-in is the thread's last error: the launch's check_launch reports it.
  if (bytes > 48 * 1024)
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(bytes));
}

}  // namespace

void attention_forward_tc(const AttnLayout& l, const void* q, const void* k, const void* v,
                          int dqkv, void* o, int dout, float* lse,
                          cudaStream_t s);  // attention_tc.cu
void attention_backward_tc(const AttnLayout& l, const void* dout, const void* q, const void* k,
                           const void* v, int dqkv, const float* lse, const launch::AttnGrads& g,
                           cudaStream_t s);  // attention_tc_bwd.cu
void attention_forward_fa2(const AttnLayout& l, const void* q, const void* k, const void* v,
                           int dqkv, void* o, int dout, float* lse,
                           cudaStream_t s);  // attention_fa2_fwd.cu
void attention_backward_fa2(const AttnLayout& l, const void* dout, const void* q, const void* k,
                            const void* v, int dqkv, const void* o, int dt_o, const float* lse,
                            const launch::AttnGrads& g,
                            cudaStream_t s);  // attention_fa2_bwd.cu (its own softmax_d)

namespace launch {

void attention_forward(const AttnLayout& l, const void* q, const void* k, const void* v, int dqkv,
                       void* o, int dout, float* lse, AttnKernel kernel, cudaStream_t s) {
  if (l.B * l.S == 0) return;
  if (kernel == AttnKernel::kFa2) return attention_forward_fa2(l, q, k, v, dqkv, o, dout, lse, s);
  if (kernel == AttnKernel::kWmma) return attention_forward_tc(l, q, k, v, dqkv, o, dout, lse, s);
  const dim3 grid(static_cast<unsigned>((l.S + kRows - 1) / kRows),
                  static_cast<unsigned>(l.B * l.H));
  allow_smem(attn_fwd_simt, fwd_smem(l.hd));
  attn_fwd_simt<<<grid, kWarps * 32, fwd_smem(l.hd), s>>>(l, q, k, v, dqkv, o, dout, lse);
  check_launch("attention forward");
}

void attention_backward(const AttnLayout& l, const void* dout, int ddout, const void* q,
                        const void* k, const void* v, int dqkv, const void* o, int dt_o,
                        const float* lse, const AttnGrads& g, AttnKernel kernel, cudaStream_t s) {
  if (l.B * l.S == 0) return;
  if (kernel == AttnKernel::kFa2)
    return attention_backward_fa2(l, dout, q, k, v, dqkv, o, dt_o, lse, g, s);
  const plan::Launch dl = plan::launch_1d(l.B * l.S * l.H * 32);
  attn_bwd_delta<<<dl.grid, dl.block, 0, s>>>(l, dout, ddout, o, dt_o, g.softmax_d, g.softmax_d_ld);
  check_launch("attention backward softmax_d");
  if (kernel == AttnKernel::kWmma) return attention_backward_tc(l, dout, q, k, v, dqkv, lse, g, s);
  const dim3 gq(static_cast<unsigned>((l.S + kRows - 1) / kRows), static_cast<unsigned>(l.B * l.H));
  allow_smem(attn_bwd_dq, dq_smem(l.hd));
  attn_bwd_dq<<<gq, kWarps * 32, dq_smem(l.hd), s>>>(l, dout, ddout, q, k, v, dqkv, lse,
                                                     g.softmax_d, g.softmax_d_ld, g.dq, g.ddq);
  check_launch("attention backward dq");
  const dim3 gk(static_cast<unsigned>((l.S + kRows - 1) / kRows),
                static_cast<unsigned>(l.B * l.Hkv));
  allow_smem(attn_bwd_dkdv, dkdv_smem(l.hd));
  attn_bwd_dkdv<<<gk, kWarps * 32, dkdv_smem(l.hd), s>>>(
      l, dout, ddout, q, k, v, dqkv, lse, g.softmax_d, g.softmax_d_ld, g.dk, g.ddk, g.dv, g.ddv);
  check_launch("attention backward dk dv");
}

}  // namespace launch
}  // namespace fullshard::cuda
