// Causal GQA attention forward on tensor cores (WMMA bf16 / fp16 -> fp32), head_dim 64 or 128.
//
// NOTE [Tensor-core flash forward]: flash-attention-2's forward (Dao 2023, Algorithm 1) with
// WMMA fragments. A block of 4 warps owns 64 query rows of one (batch, head), 16 per warp, and
// walks the causal prefix of keys in tiles of 64 staged in shared memory. Per tile each warp
// computes its 16 x 64 scores S = Q K^T on tensor cores into shared memory, runs the online
// softmax there (two lanes per row: running max, rescale of the fp32 output rows, P rounded to
// the storage dtype as flash does), then accumulates O += P V on tensor cores with the output
// held in shared memory as fp32. O is normalised once at the end and rounded once; lse is saved
// in natural-log units of the scaled scores. Only O and lse are written.
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
using tc::stage_rows;
using tc::to_t;
constexpr int kWarpsTc = tc::kWarps;

template <int HD>
struct TcSmem {
  static constexpr int LDT = HD + 8;   // Q / K / V rows (storage dtype), 16-byte multiple
  static constexpr int LDS = kBK + 4;  // scores (fp32)
  static constexpr int LDP = kBK + 8;  // P (storage dtype)
  static constexpr int LDO = HD + 4;   // output accumulator (fp32)
  static constexpr size_t bytes = static_cast<size_t>(kBQ * LDT + 2 * kBK * LDT) * 2 +
                                  static_cast<size_t>(kWarpsTc * 16 * LDS) * 4 +
                                  static_cast<size_t>(kWarpsTc * 16 * LDP) * 2 +
                                  static_cast<size_t>(kWarpsTc * 16 * LDO) * 4;
};

template <class T, int HD>
__global__ void __launch_bounds__(kWarpsTc * 32)
    attn_fwd_tc(AttnLayout l, const T* q, const T* k, const T* v, void* o, int dout, float* lse) {
  using Sm = TcSmem<HD>;
  constexpr int LDT = Sm::LDT, LDS = Sm::LDS, LDP = Sm::LDP, LDO = Sm::LDO;
  extern __shared__ __align__(128) unsigned char raw[];
  T* Qs = reinterpret_cast<T*>(raw);
  T* Ks = Qs + kBQ * LDT;
  T* Vs = Ks + kBK * LDT;
  float* Ss = reinterpret_cast<float*>(Vs + kBK * LDT);
  T* Ps = reinterpret_cast<T*>(Ss + kWarpsTc * 16 * LDS);
  float* Os = reinterpret_cast<float*>(Ps + kWarpsTc * 16 * LDP);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.y, b = bh / l.H, h = bh % l.H, kvh = h / l.group;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kBQ, wrow0 = q0 + warp * 16;
  float* Sw = Ss + warp * 16 * LDS;
  T* Pw = Ps + warp * 16 * LDP;
  float* Ow = Os + warp * 16 * LDO;

  stage_rows<T, HD>(Qs, LDT, q, kBQ, [&](int t) {
    return q0 + t < l.S ? attn_q_index(l, b, q0 + t, h) : int64_t(-1);
  });
  for (int e = lane; e < 16 * HD; e += 32) Ow[(e / HD) * LDO + e % HD] = 0.0f;

  const int r = lane >> 1, half = lane & 1;  // softmax: two lanes per row
  const int64_t i = wrow0 + r;
  float m_run = -INFINITY, l_run = 0.0f;
  const int64_t last = min(l.S, q0 + kBQ);
  for (int64_t j0 = 0; j0 < last; j0 += kBK) {
    __syncthreads();
    stage_rows<T, HD>(Ks, LDT, k, kBK, [&](int t) {
      return j0 + t < l.S ? attn_k_index(l, b, j0 + t, kvh) : int64_t(-1);
    });
    stage_rows<T, HD>(Vs, LDT, v, kBK, [&](int t) {
      return j0 + t < l.S ? attn_v_index(l, b, j0 + t, kvh) : int64_t(-1);
    });
    __syncthreads();
    if (wrow0 >= l.S || j0 > wrow0 + 15) continue;  // warp-uniform: every key of the tile is masked

      // S = Q K^T (16 x 64 per warp).
#pragma unroll
    for (int n0 = 0; n0 < kBK; n0 += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::fill_fragment(c, 0.0f);
#pragma unroll
      for (int k0 = 0; k0 < HD; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bt;
        wmma::load_matrix_sync(a, Qs + warp * 16 * LDT + k0, LDT);
        wmma::load_matrix_sync(bt, Ks + n0 * LDT + k0, LDT);  // K rows = columns of K^T
        wmma::mma_sync(c, a, bt, c);
      }
      wmma::store_matrix_sync(Sw + n0, c, LDS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax on row r, columns [32 half, 32 half + 32).
    float* srow = Sw + r * LDS;
    float mx = -INFINITY;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int64_t j = j0 + c;
      const float s = j <= i && i < l.S ? srow[c] * l.scale : -INFINITY;
      srow[c] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m_run, mx);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = expf(m_run - m_use);
    float ps = 0.0f;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float p = expf(srow[c] - m_use);
      ps += p;
      Pw[r * LDP + c] = to_t<T>(p);
    }
    ps += __shfl_xor_sync(0xffffffffu, ps, 1);
    l_run = l_run * alpha + ps;
    m_run = m_new;
    for (int c = half * (HD / 2); c < (half + 1) * (HD / 2); ++c) Ow[r * LDO + c] *= alpha;
    __syncwarp();

    // O += P V (16 x HD per warp).
#pragma unroll
    for (int n0 = 0; n0 < HD; n0 += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::load_matrix_sync(c, Ow + n0, LDO, wmma::mem_row_major);
#pragma unroll
      for (int k0 = 0; k0 < kBK; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bv;
        wmma::load_matrix_sync(a, Pw + k0, LDP);
        wmma::load_matrix_sync(bv, Vs + k0 * LDT + n0, LDT);
        wmma::mma_sync(c, a, bv, c);
      }
      wmma::store_matrix_sync(Ow + n0, c, LDO, wmma::mem_row_major);
    }
    __syncwarp();
  }
  if (i < l.S) {
    const float inv = 1.0f / l_run;
    const int64_t oi = attn_o_index(l, b, i, h);
    for (int c = half * (HD / 2); c < (half + 1) * (HD / 2); ++c)
      store_f(o, dout, oi + c, Ow[r * LDO + c] * inv);
    if (half == 0) lse[attn_lse_index(l, b, h, i)] = m_run + logf(l_run);
  }
}

template <class T, int HD>
void run_tc(const AttnLayout& l, const void* q, const void* k, const void* v, void* o, int dout,
            float* lse, cudaStream_t s) {
  const size_t smem = TcSmem<HD>::bytes;
  cudaFuncSetAttribute(attn_fwd_tc<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(smem));
  const dim3 grid(static_cast<unsigned>((l.S + kBQ - 1) / kBQ), static_cast<unsigned>(l.B * l.H));
  attn_fwd_tc<T, HD><<<grid, kWarpsTc * 32, smem, s>>>(l, static_cast<const T*>(q),
                                                       static_cast<const T*>(k),
                                                       static_cast<const T*>(v), o, dout, lse);
  launch::check_launch("attention forward (tensor cores)");
}

}  // namespace

size_t launch::attention_forward_tc_smem(int64_t hd) {
  return hd == 64 ? TcSmem<64>::bytes : TcSmem<128>::bytes;
}

// Called by launch::attention_forward for bf16 / fp16 q, k, v with head_dim 64 or 128 and
// 16-byte aligned bases (plan::attention_uses_tensor_cores).
void attention_forward_tc(const AttnLayout& l, const void* q, const void* k, const void* v,
                          int dqkv, void* o, int dout, float* lse, cudaStream_t s) {
  if (dqkv == kBF16) {
    if (l.hd == 64) return run_tc<__nv_bfloat16, 64>(l, q, k, v, o, dout, lse, s);
    return run_tc<__nv_bfloat16, 128>(l, q, k, v, o, dout, lse, s);
  }
  if (l.hd == 64) return run_tc<__half, 64>(l, q, k, v, o, dout, lse, s);
  run_tc<__half, 128>(l, q, k, v, o, dout, lse, s);
}

}  // namespace fullshard::cuda
