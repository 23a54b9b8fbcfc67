// Causal GQA attention forward, FlashAttention-2 (Dao 2023, Algorithm 1) on mma.sync: bf16 /
// fp16 with fp32 accumulation, head_dim 32, 64, 80, 96 or 128, sm_80 and later.
//
// NOTE [FlashAttention-2 forward]: a block of 4 warps owns one query tile of one (batch, query
// head) (NOTE [FlashAttention-2 tiles]); its kv head is h / group. Q is copied once with
// cp.async and kept in registers as A fragments. Key tiles run from the diagonal (the only
// masked ones) down to 0 with K and V double buffered: the copy of the next tile is in flight
// while this one is multiplied. Per tile each warp computes S = Q K^T (B fragments by ldmatrix
// from K's rows), applies the causal mask, runs the online softmax in registers (each row
// lives in the 4 lanes of a quad: max by two xor shuffles, the running sum kept per lane and
// reduced once at the end), rounds P to the storage dtype straight into A fragments and adds
// P V into the fp32 O fragments (B fragments by ldmatrix.trans from V's rows). O is divided by
// the row sum once and rounded once; lse = m * scale + log(sum), natural log of scaled scores,
// as PyTorch's flash saves it. Query tiles run in reverse block order: the longest rows first.
#include "backends/cuda/kernels/attention_fa2.cuh"
#include "backends/cuda/kernels/attention_fa2_plan.h"
#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"

namespace fullshard::cuda {
namespace {

using namespace fa2;

template <class T, int HD>
__global__ void __launch_bounds__(kThreads)
    attn_fwd_fa2(AttnLayout l, const T* __restrict__ q, const T* __restrict__ k,
                 const T* __restrict__ v, void* o, int dout, float* __restrict__ lse) {
  constexpr int BM = fwd_query_tile(HD), BN = kKeyTile, LD = row_stride(HD);
  constexpr int MT = BM / (16 * kWarps);  // m16 tiles per warp
  constexpr int KD = HD / 16, NS = BN / 8, NO = HD / 8;
  extern __shared__ __align__(128) unsigned char raw[];
  T* Qs = reinterpret_cast<T*>(raw);
  T* Ks = Qs + BM * LD;      // two buffers of BN x LD
  T* Vs = Ks + 2 * BN * LD;  // two buffers of BN x LD

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
  const int64_t h = blockIdx.y, b = blockIdx.z, kvh = kv_head(h, l.group);
  const int64_t qt = fwd_query_tile_of_block(blockIdx.x, gridDim.x), q0 = qt * BM;
  const int64_t n_tiles = fwd_key_tiles(qt, l.S, HD);
  const int wr0 = warp * MT * 16;  // the warp's first row in the tile

  auto load_kv = [&](int64_t kt, int buf) {
    const int64_t j0 = kt * BN;
    async_rows<HD>(Ks + buf * BN * LD, LD, k, BN, [&](int r) {
      return j0 + r < l.S ? attn_k_index(l, b, j0 + r, kvh) : int64_t(-1);
    });
    async_rows<HD>(Vs + buf * BN * LD, LD, v, BN, [&](int r) {
      return j0 + r < l.S ? attn_v_index(l, b, j0 + r, kvh) : int64_t(-1);
    });
  };
  async_rows<HD>(Qs, LD, q, BM,
                 [&](int r) { return q0 + r < l.S ? attn_q_index(l, b, q0 + r, h) : int64_t(-1); });
  cp_async_commit();
  load_kv(n_tiles - 1, 0);
  cp_async_commit();

  float acc[MT][NO][4], m_run[MT][2], l_run[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m_run[mt][r] = -INFINITY;
      l_run[mt][r] = 0.0f;
    }
#pragma unroll
    for (int n = 0; n < NO; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][n][e] = 0.0f;
  }
  uint32_t qf[MT][KD][4];
  cp_async_wait<1>();  // Q (the first group) has landed
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int kd = 0; kd < KD; ++kd)
      ldmatrix_x4(qf[mt][kd], Qs + (wr0 + mt * 16 + a_row(lane)) * LD + kd * 16 + a_col(lane));
  const float sl2 = l.scale * 1.4426950408889634f;  // scale * log2(e): exp(x scale) = exp2(x sl2)

  for (int64_t it = 0; it < n_tiles; ++it) {
    const int64_t kt = n_tiles - 1 - it;
    const int buf = static_cast<int>(it & 1);
    if (kt > 0) {  // the next tile's copy overlaps this tile's products
      load_kv(kt - 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* Kb = Ks + buf * BN * LD;
    const T* Vb = Vs + buf * BN * LD;

    float s[MT][NS][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < NS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][n][e] = 0.0f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd)
#pragma unroll
      for (int np = 0; np < NS / 2; ++np) {
        uint32_t kb[4];
        ldmatrix_x4(kb, Kb + (np * 16 + b_row(lane)) * LD + kd * 16 + b_col(lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<T>(s[mt][2 * np], qf[mt][kd], kb[0], kb[1]);
          mma16816<T>(s[mt][2 * np + 1], qf[mt][kd], kb[2], kb[3]);
        }
      }

    const int64_t j0 = kt * BN;
    if (fwd_tile_masked(qt, kt, HD)) {  // block-uniform
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t i = q0 + wr0 + mt * 16 + g + (e >> 1) * 8,
                          j = j0 + n * 8 + 2 * t4 + (e & 1);
            if (j > i) s[mt][n][e] = -INFINITY;
          }
    }

    // Online softmax: rows g (e = 0, 1) and g + 8 (e = 2, 3) of each m16 tile.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = m_run[mt][r];
#pragma unroll
        for (int n = 0; n < NS; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_use = mx == -INFINITY ? 0.0f : mx;  // a row with every key so far masked
        const float alpha = exp2f((m_run[mt][r] - m_use) * sl2);
        const float off = m_use * sl2;
        m_run[mt][r] = mx;
        float rs = 0.0f;
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float p = exp2f(fmaf(s[mt][n][2 * r + c], sl2, -off));
            s[mt][n][2 * r + c] = p;
            rs += p;
          }
        l_run[mt][r] = l_run[mt][r] * alpha + rs;
#pragma unroll
        for (int n = 0; n < NO; ++n) {
          acc[mt][n][2 * r] *= alpha;
          acc[mt][n][2 * r + 1] *= alpha;
        }
      }

      // O += P V: P (rounded to T) is the A operand straight from the S fragments.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) acc_to_a<T>(pa[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < NO / 2; ++np) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, Vb + (kk * 16 + bt_row(lane)) * LD + np * 16 + bt_col(lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<T>(acc[mt][2 * np], pa[mt], vb[0], vb[1]);
          mma16816<T>(acc[mt][2 * np + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with buffer `buf` before the copy two tiles on
  }

  const bool o_is_t = dout == dcode_of<T>();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l_run[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int64_t i = q0 + wr0 + mt * 16 + g + r * 8;
      if (i >= l.S) continue;
      const float inv = 1.0f / sum;
      const int64_t oi = attn_o_index(l, b, i, h);
#pragma unroll
      for (int n = 0; n < NO; ++n) {
        const int64_t at = oi + n * 8 + 2 * t4;
        const float v0 = acc[mt][n][2 * r] * inv, v1 = acc[mt][n][2 * r + 1] * inv;
        if (o_is_t) {
          *reinterpret_cast<uint32_t*>(static_cast<T*>(o) + at) = pack2<T>(v0, v1);
        } else {
          dev::store_f(o, dout, at, v0);
          dev::store_f(o, dout, at + 1, v1);
        }
      }
      if (t4 == 0) lse[attn_lse_index(l, b, h, i)] = m_run[mt][r] * l.scale + logf(sum);
    }
}

template <class T, int HD>
void run_fwd(const AttnLayout& l, const void* q, const void* k, const void* v, void* o, int dout,
             float* lse, cudaStream_t s) {
  const int smem = static_cast<int>(fwd_smem_bytes(HD));
  cudaFuncSetAttribute(attn_fwd_fa2<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const Grid3 gr = fwd_grid(l);
  const dim3 grid(static_cast<unsigned>(gr.x), static_cast<unsigned>(gr.y),
                  static_cast<unsigned>(gr.z));
  attn_fwd_fa2<T, HD><<<grid, kThreads, smem, s>>>(l, static_cast<const T*>(q),
                                                   static_cast<const T*>(k),
                                                   static_cast<const T*>(v), o, dout, lse);
  launch::check_launch(
      "attention forward (FlashAttention-2; FULLSHARD_ATTENTION_KERNELS=wmma runs the WMMA "
      "kernels)");
}

template <class T>
void run_fwd_t(const AttnLayout& l, const void* q, const void* k, const void* v, void* o, int dout,
               float* lse, cudaStream_t s) {
  switch (l.hd) {
    case 32: return run_fwd<T, 32>(l, q, k, v, o, dout, lse, s);
    case 64: return run_fwd<T, 64>(l, q, k, v, o, dout, lse, s);
    case 80: return run_fwd<T, 80>(l, q, k, v, o, dout, lse, s);
    case 96: return run_fwd<T, 96>(l, q, k, v, o, dout, lse, s);
    default: return run_fwd<T, 128>(l, q, k, v, o, dout, lse, s);
  }
}

}  // namespace

// Called by launch::attention_forward for bf16 / fp16 q, k, v with fa2::supports_head_dim and
// 16-byte aligned bases (dispatch.cc).
void attention_forward_fa2(const AttnLayout& l, const void* q, const void* k, const void* v,
                           int dqkv, void* o, int dout, float* lse, cudaStream_t s) {
  if (dqkv == kBF16) return run_fwd_t<__nv_bfloat16>(l, q, k, v, o, dout, lse, s);
  run_fwd_t<__half>(l, q, k, v, o, dout, lse, s);
}

}  // namespace fullshard::cuda
