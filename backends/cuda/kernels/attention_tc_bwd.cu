// Causal GQA attention backward on tensor cores (WMMA bf16 / fp16 -> fp32), head_dim 64 or 128.
//
// NOTE [Tensor-core flash backward]: flash-attention-2's backward (Dao 2023, Algorithm 2) in the
// SIMT backward's no-atomics split (NOTE [SIMT flash attention]): three kernels, each gradient
// element written once by one thread from sums in a fixed order (deterministic), and no memory
// beyond the op's outputs and its softmax_d temporary (NOTE [No kernel allocations]).
//  1. softmax_d = rowsum(dO * O): attn_bwd_delta (attention.cu), shared with the SIMT path.
//  2. dq: a block of 4 warps owns 64 query rows of one (batch, head), 16 per warp, staged with
//     their dO rows, lse and softmax_d; it walks the causal prefix of keys in tiles of 64 (K, V
//     staged). Per tile each warp computes S = Q K^T and dP = dO V^T (16 x 64 each) on tensor
//     cores into fp32 shared memory, then per element P = exp(scale * S - lse) (0 where key j >
//     query i or i >= S) and dS = P * (dP - softmax_d), and dQ += dS K on tensor cores. dQ stays
//     in register fragments: unlike the forward's O there is no rescaling, so the opaque
//     fragment layout is no obstacle. Query tiles run last first (the longest causal rows).
//  3. dk / dv: a block owns 64 key rows of one (batch, kv head), 16 per warp, with K and V
//     staged once; it walks every query head of the GQA group and, per head, the query tiles
//     from its own tile to S (earlier queries never see these keys). Per tile each warp
//     computes S^T = K Q^T and dP^T = V dO^T, then P^T (fp32 kept in place of S^T, a rounded
//     copy for the product), dV += P^T dO, then dS^T = P^T * (dP^T - softmax_d) into the same
//     16-bit buffer and dK += dS^T Q. dK and dV stay in register fragments across the group's
//     heads, so GQA needs neither atomics nor the expanded dk / dv.
// Rounding points, as FlashAttention-2: P is rounded to the storage dtype before P^T dO and dS
// before dS K and dS^T Q; dS itself is formed from fp32 P and fp32 dP; every accumulation is
// fp32. lse is in natural-log units of the scaled scores (the forward's), so P needs no
// log2 rescaling; the softmax scale multiplies S before exp and dq / dk once at the end, in
// fp32, before the single rounding of each output (dv has no scale).
// Shared memory, both kernels (T = 2 bytes): Q, dO, K, V tiles 64 x (HD + 8) T; per warp S and
// dP 16 x 68 fp32 and one 16 x 72 T buffer (dS, or P^T then dS^T); lse and softmax_d of 64
// rows. hd 64: 81,408 B (79.5 KB), hd 128: 114,176 B (111.5 KB). Per block sm_80 allows 163 KB
// (164 KB per SM: 2 blocks at hd 64, 1 at hd 128), sm_90 227 KB (228 KB per SM: 2 at both).
// Padding: rows of HD + 8 (T) and 68 (fp32) elements shift successive rows by 16 bytes across
// the banks; every WMMA pointer is a multiple of 16 rows or 16 columns from a 128-byte aligned
// base (32-byte alignment needed) and every ldm is a multiple of 8 (T) or 4 (fp32).
#include <mma.h>

#include "backends/cuda/kernels/attention_tc.cuh"
#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"

namespace fullshard::cuda {
namespace {

using namespace dev;
using namespace nvcuda;
using tc::kBK;
using tc::kBQ;
using tc::kWarps;
using tc::stage_rows;
using tc::to_t;

static_assert(kBQ == kBK, "the dk / dv kernel starts its query tiles at its own key tile");

template <int HD>
struct BwdSmem {
  static constexpr int LDT = HD + 8;   // Q / dO / K / V tile rows (T)
  static constexpr int LDS = kBK + 4;  // S and dP (fp32), 16 x 64 per warp
  static constexpr int LDP = kBK + 8;  // dS or P (T), 16 x 64 per warp
  static constexpr size_t kTile = static_cast<size_t>(kBQ) * LDT * 2;
  static constexpr size_t kWarpF = static_cast<size_t>(kWarps) * 16 * LDS * 4;
  static constexpr size_t kWarpT = static_cast<size_t>(kWarps) * 16 * LDP * 2;
  // Byte offsets: four tiles, S, dP, the 16-bit buffer, lse, softmax_d.
  static constexpr size_t kS = 4 * kTile, kDP = kS + kWarpF, kT = kDP + kWarpF, kL = kT + kWarpT;
  static constexpr size_t kD = kL + kBQ * 4, bytes = kD + kBQ * 4;
  static_assert(kTile % 128 == 0 && kWarpF % 128 == 0 && kWarpT % 128 == 0,
                "WMMA bases need 32-byte alignment");
  static_assert(LDT % 8 == 0 && LDP % 8 == 0 && LDS % 4 == 0,
                "WMMA ldm: multiple of 8 (16-bit) or 4 (fp32)");
};
static_assert(BwdSmem<64>::bytes == 81408 && BwdSmem<128>::bytes == 114176,
              "NOTE [Tensor-core flash backward]");

template <class T, int HD>
struct BwdTiles {
  T *t0, *t1, *t2, *t3;  // four 64-row tiles
  float *s, *dp;         // this warp's 16 x 64 fp32 blocks
  T* w;                  // this warp's 16 x 64 T block
  float *lse, *sd;       // 64 rows each
  __device__ explicit BwdTiles(unsigned char* raw, int warp) {
    using Sm = BwdSmem<HD>;
    t0 = reinterpret_cast<T*>(raw);
    t1 = reinterpret_cast<T*>(raw + Sm::kTile);
    t2 = reinterpret_cast<T*>(raw + 2 * Sm::kTile);
    t3 = reinterpret_cast<T*>(raw + 3 * Sm::kTile);
    s = reinterpret_cast<float*>(raw + Sm::kS) + warp * 16 * Sm::LDS;
    dp = reinterpret_cast<float*>(raw + Sm::kDP) + warp * 16 * Sm::LDS;
    w = reinterpret_cast<T*>(raw + Sm::kT) + warp * 16 * Sm::LDP;
    lse = reinterpret_cast<float*>(raw + Sm::kL);
    sd = reinterpret_cast<float*>(raw + Sm::kD);
  }
};

using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// c (16 x 64 fp32, row stride LDS) = A B^T: A is 16 rows of HD at `a`, B is the 64 rows of HD at
// `bm` (both row stride LDT). B^T read as a col_major matrix_b: element (d, n) of B^T is
// bm[n * LDT + d], so its 16 x 16 block (k0, 16 n) starts at bm + 16 n * LDT + k0 with ldm LDT.
// k0 outer: each A block is loaded once and only the four accumulators stay live.
template <class T, int HD>
__device__ __forceinline__ void mul_abt(float* c, const T* a, const T* bm) {
  constexpr int LDT = BwdSmem<HD>::LDT, LDS = BwdSmem<HD>::LDS;
  Acc acc[kBK / 16];
#pragma unroll
  for (int n = 0; n < kBK / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
  for (int k0 = 0; k0 < HD; k0 += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + k0, LDT);
#pragma unroll
    for (int n = 0; n < kBK / 16; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
      wmma::load_matrix_sync(fb, bm + n * 16 * LDT + k0, LDT);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < kBK / 16; ++n)
    wmma::store_matrix_sync(c + n * 16, acc[n], LDS, wmma::mem_row_major);
}

// acc[n] (16 x 16 column block n of a 16 x HD product) += A B: A is 16 x 64 T at `a` (row stride
// LDP), B the 64 rows of HD at `bm` (row stride LDT) read row_major: block (k0, 16 n) starts at
// bm + k0 * LDT + 16 n.
template <class T, int HD>
__device__ __forceinline__ void mul_ab_acc(Acc (&acc)[HD / 16], const T* a, const T* bm) {
  constexpr int LDT = BwdSmem<HD>::LDT, LDP = BwdSmem<HD>::LDP;
#pragma unroll 1  // the HD / 16 independent products per step are enough; unrolled, hd 128 spills
  for (int k0 = 0; k0 < kBK; k0 += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + k0, LDP);
#pragma unroll
    for (int n = 0; n < HD / 16; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
      wmma::load_matrix_sync(fb, bm + k0 * LDT + n * 16, LDT);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Writes a warp's 16 x HD accumulator, times `mul`, rounded to dtype `dt`: row r goes to
// element out_row(r) (skipped when < 0). Staged 64 columns at a time through the warp's fp32
// block `s`, which the warp must be done with.
template <int HD, class Row>
__device__ __forceinline__ void write_rows(Acc (&acc)[HD / 16], float* s, float mul, void* out,
                                           int dt, Row out_row) {
  constexpr int LDS = BwdSmem<HD>::LDS;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int chunk = 0; chunk < HD / 64; ++chunk) {
    __syncwarp();
#pragma unroll
    for (int n = 0; n < 4; ++n)
      wmma::store_matrix_sync(s + n * 16, acc[chunk * 4 + n], LDS, wmma::mem_row_major);
    __syncwarp();
    for (int r = 0; r < 16; ++r) {
      const int64_t at = out_row(r);
      if (at < 0) continue;
      store_f(out, dt, at + chunk * 64 + lane, s[r * LDS + lane] * mul);
      store_f(out, dt, at + chunk * 64 + lane + 32, s[r * LDS + lane + 32] * mul);
    }
  }
}

template <class T, int HD>
__global__ void __launch_bounds__(kWarps * 32)
    attn_bwd_dq_tc(AttnLayout l, const T* dout, const T* q, const T* k, const T* v,
                   const float* lse, const float* softmax_d, int64_t sd_ld, void* dq, int ddq) {
  constexpr int LDT = BwdSmem<HD>::LDT, LDS = BwdSmem<HD>::LDS, LDP = BwdSmem<HD>::LDP;
  extern __shared__ __align__(128) unsigned char raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const BwdTiles<T, HD> sm(raw, warp);
  T *Qs = sm.t0, *Gs = sm.t1, *Ks = sm.t2, *Vs = sm.t3;  // Gs: dO rows

  const int64_t bh = blockIdx.y, b = bh / l.H, h = bh % l.H, kvh = h / l.group;
  const int64_t q0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kBQ, wrow0 = q0 + warp * 16;
  stage_rows<T, HD>(Qs, LDT, q, kBQ, [&](int t) {
    return q0 + t < l.S ? attn_q_index(l, b, q0 + t, h) : int64_t(-1);
  });
  stage_rows<T, HD>(Gs, LDT, dout, kBQ, [&](int t) {
    return q0 + t < l.S ? attn_o_index(l, b, q0 + t, h) : int64_t(-1);
  });
  for (int t = threadIdx.x; t < kBQ; t += blockDim.x) {
    const bool in = q0 + t < l.S;
    sm.lse[t] = in ? lse[attn_lse_index(l, b, h, q0 + t)] : 0.0f;
    sm.sd[t] = in ? softmax_d[(b * l.H + h) * sd_ld + q0 + t] : 0.0f;
  }

  Acc acc[HD / 16];
#pragma unroll
  for (int n = 0; n < HD / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
  const int64_t last = min(l.S, q0 + kBQ);  // keys [0, last) can be visible to this tile
  for (int64_t j0 = 0; j0 < last; j0 += kBK) {
    __syncthreads();  // the previous tile's K / V reads are done (and Q / dO / lse staged)
    stage_rows<T, HD>(Ks, LDT, k, kBK, [&](int t) {
      return j0 + t < l.S ? attn_k_index(l, b, j0 + t, kvh) : int64_t(-1);
    });
    stage_rows<T, HD>(Vs, LDT, v, kBK, [&](int t) {
      return j0 + t < l.S ? attn_v_index(l, b, j0 + t, kvh) : int64_t(-1);
    });
    __syncthreads();
    if (wrow0 >= l.S || j0 > wrow0 + 15) continue;  // warp-uniform: every key of the tile is masked

    mul_abt<T, HD>(sm.s, Qs + warp * 16 * LDT, Ks);   // S = Q K^T
    mul_abt<T, HD>(sm.dp, Gs + warp * 16 * LDT, Vs);  // dP = dO V^T
    __syncwarp();
    for (int r = 0; r < 16; ++r) {  // row r of the warp: lane owns columns lane, lane + 32
      const int64_t i = wrow0 + r;
      const float L = sm.lse[warp * 16 + r], Dl = sm.sd[warp * 16 + r];
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const int c = lane + 32 * t;
        float ds = 0.0f;
        if (j0 + c <= i && i < l.S)
          ds = expf(sm.s[r * LDS + c] * l.scale - L) * (sm.dp[r * LDS + c] - Dl);
        sm.w[r * LDP + c] = to_t<T>(ds);
      }
    }
    __syncwarp();
    mul_ab_acc<T, HD>(acc, sm.w, Ks);  // dQ += dS K
  }
  // dq is [B, S, H, hd] (q's compact layout): attn_o_index.
  write_rows<HD>(acc, sm.s, l.scale, dq, ddq, [&](int r) {
    return wrow0 + r < l.S ? attn_o_index(l, b, wrow0 + r, h) : int64_t(-1);
  });
}

template <class T, int HD>
__global__ void __launch_bounds__(kWarps * 32)
    attn_bwd_dkdv_tc(AttnLayout l, const T* dout, const T* q, const T* k, const T* v,
                     const float* lse, const float* softmax_d, int64_t sd_ld, void* dk, int ddk,
                     void* dv, int ddv) {
  constexpr int LDT = BwdSmem<HD>::LDT, LDS = BwdSmem<HD>::LDS, LDP = BwdSmem<HD>::LDP;
  extern __shared__ __align__(128) unsigned char raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const BwdTiles<T, HD> sm(raw, warp);
  T *Ks = sm.t0, *Vs = sm.t1, *Qs = sm.t2, *Gs = sm.t3;  // Gs: dO rows

  const int64_t bh = blockIdx.y, b = bh / l.Hkv, kvh = bh % l.Hkv;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kBK, wk0 = k0 + warp * 16;
  stage_rows<T, HD>(Ks, LDT, k, kBK, [&](int t) {
    return k0 + t < l.S ? attn_k_index(l, b, k0 + t, kvh) : int64_t(-1);
  });
  stage_rows<T, HD>(Vs, LDT, v, kBK, [&](int t) {
    return k0 + t < l.S ? attn_v_index(l, b, k0 + t, kvh) : int64_t(-1);
  });

  Acc gk[HD / 16], gv[HD / 16];
#pragma unroll
  for (int n = 0; n < HD / 16; ++n) {
    wmma::fill_fragment(gk[n], 0.0f);
    wmma::fill_fragment(gv[n], 0.0f);
  }
  for (int64_t h = kvh * l.group; h < (kvh + 1) * l.group; ++h) {
    // Query tiles from this key tile on (kBQ == kBK): a query before k0 sees none of its keys.
    for (int64_t i0 = k0; i0 < l.S; i0 += kBQ) {
      __syncthreads();  // the previous tile's Q / dO / lse reads are done (and K / V staged)
      stage_rows<T, HD>(Qs, LDT, q, kBQ, [&](int t) {
        return i0 + t < l.S ? attn_q_index(l, b, i0 + t, h) : int64_t(-1);
      });
      stage_rows<T, HD>(Gs, LDT, dout, kBQ, [&](int t) {
        return i0 + t < l.S ? attn_o_index(l, b, i0 + t, h) : int64_t(-1);
      });
      for (int t = threadIdx.x; t < kBQ; t += blockDim.x) {
        const bool in = i0 + t < l.S;
        sm.lse[t] = in ? lse[attn_lse_index(l, b, h, i0 + t)] : 0.0f;
        sm.sd[t] = in ? softmax_d[(b * l.H + h) * sd_ld + i0 + t] : 0.0f;
      }
      __syncthreads();
      if (wk0 >= l.S) continue;  // warp-uniform: none of the warp's keys exists

      mul_abt<T, HD>(sm.s, Ks + warp * 16 * LDT, Qs);  // S^T = K Q^T (rows: keys, columns: queries)
      mul_abt<T, HD>(sm.dp, Vs + warp * 16 * LDT, Gs);  // dP^T = V dO^T
      __syncwarp();
      // Lane owns query columns lane and lane + 32 of every key row r.
      float L[2], Dl[2];
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        L[t] = sm.lse[lane + 32 * t];
        Dl[t] = sm.sd[lane + 32 * t];
      }
#pragma unroll 1  // rolled, like the dS^T loop below: keeps hd 128 (dK + dV: 128 registers)
                  // unspilled
      for (int r = 0; r < 16; ++r) {
        const int64_t j = wk0 + r;
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          const int c = lane + 32 * t;
          const int64_t i = i0 + c;
          const float p = j <= i && i < l.S ? expf(sm.s[r * LDS + c] * l.scale - L[t]) : 0.0f;
          sm.s[r * LDS + c] = p;  // fp32 P^T for dS^T below (same lane, same element)
          sm.w[r * LDP + c] = to_t<T>(p);
        }
      }
      __syncwarp();
      mul_ab_acc<T, HD>(gv, sm.w, Gs);  // dV += P^T dO
      __syncwarp();                     // every lane has read P^T before dS^T replaces it
#pragma unroll 1
      for (int r = 0; r < 16; ++r) {
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          const int c = lane + 32 * t;
          sm.w[r * LDP + c] = to_t<T>(sm.s[r * LDS + c] * (sm.dp[r * LDS + c] - Dl[t]));
        }
      }
      __syncwarp();
      mul_ab_acc<T, HD>(gk, sm.w, Qs);  // dK += dS^T Q
    }
  }
  // dk / dv are [B, S, Hkv, hd].
  auto row = [&](int r) {
    return wk0 + r < l.S ? ((b * l.S + wk0 + r) * l.Hkv + kvh) * l.hd : int64_t(-1);
  };
  write_rows<HD>(gk, sm.s, l.scale, dk, ddk, row);
  write_rows<HD>(gv, sm.s, 1.0f, dv, ddv, row);
}

template <class T, int HD>
void run_bwd_tc(const AttnLayout& l, const void* dout, const void* q, const void* k, const void* v,
                const float* lse, const launch::AttnGrads& g, cudaStream_t s) {
  const int smem = static_cast<int>(BwdSmem<HD>::bytes);
  const unsigned tiles = static_cast<unsigned>((l.S + kBQ - 1) / kBQ);
  const T *tq = static_cast<const T*>(q), *tk = static_cast<const T*>(k),
          *tv = static_cast<const T*>(v);
  const T* tg = static_cast<const T*>(dout);
  cudaFuncSetAttribute(attn_bwd_dq_tc<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  attn_bwd_dq_tc<T, HD><<<dim3(tiles, static_cast<unsigned>(l.B * l.H)), kWarps * 32, smem, s>>>(
      l, tg, tq, tk, tv, lse, g.softmax_d, g.softmax_d_ld, g.dq, g.ddq);
  launch::check_launch(
      "attention backward dq (tensor cores; FULLSHARD_ATTENTION_KERNELS=simt runs the SIMT "
      "kernels)");
  cudaFuncSetAttribute(attn_bwd_dkdv_tc<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  attn_bwd_dkdv_tc<T, HD>
      <<<dim3(tiles, static_cast<unsigned>(l.B * l.Hkv)), kWarps * 32, smem, s>>>(
          l, tg, tq, tk, tv, lse, g.softmax_d, g.softmax_d_ld, g.dk, g.ddk, g.dv, g.ddv);
  launch::check_launch(
      "attention backward dk dv (tensor cores; FULLSHARD_ATTENTION_KERNELS=simt runs the SIMT "
      "kernels)");
}

}  // namespace

size_t launch::attention_backward_tc_smem(int64_t hd) {
  return hd == 64 ? BwdSmem<64>::bytes : BwdSmem<128>::bytes;
}

// Called by launch::attention_backward after softmax_d, for bf16 / fp16 q, k, v and dO (one
// dtype) with head_dim 64 or 128 and 16-byte aligned bases (dispatch.cc).
void attention_backward_tc(const AttnLayout& l, const void* dout, const void* q, const void* k,
                           const void* v, int dqkv, const float* lse, const launch::AttnGrads& g,
                           cudaStream_t s) {
  if (dqkv == kBF16) {
    if (l.hd == 64) return run_bwd_tc<__nv_bfloat16, 64>(l, dout, q, k, v, lse, g, s);
    return run_bwd_tc<__nv_bfloat16, 128>(l, dout, q, k, v, lse, g, s);
  }
  if (l.hd == 64) return run_bwd_tc<__half, 64>(l, dout, q, k, v, lse, g, s);
  run_bwd_tc<__half, 128>(l, dout, q, k, v, lse, g, s);
}

}  // namespace fullshard::cuda
