// Causal GQA attention backward, FlashAttention-2 (Dao 2023, Algorithm 2) on mma.sync: bf16 /
// fp16 with fp32 accumulation, head_dim 32, 64, 80, 96 or 128, sm_80 and later.
//
// NOTE [FlashAttention-2 backward]: three or four launches, into exactly the temporaries the
// model declares for PyTorch's flash backward (NOTE [Flash attention backward temporaries],
// core/model/ops.cc):
//  1. softmax_d = rowsum(dO * O) in fp32, and dq_accum (fp32 [B, round128(S), H, round32(hd)])
//     zeroed in the same pass.
//  2. The main kernel: a block of 8 warps (4 at head_dim 128) owns a key tile of 16 keys per
//     warp of one (batch, query head), K and V copied once; it walks the query tiles from its own
//     to the end with Q, dO, lse and softmax_d double buffered by cp.async. Per query tile the five
//     products: each warp computes S^T = K Q^T and dP^T = V dO^T (16 keys x BM queries, in
//     registers), P^T = exp(scale S^T - lse) (0 past the causal diagonal) and dS^T = P^T (dP^T
//     - softmax_d), then dV += P^T dO and dK += dS^T Q with P^T and dS^T rounded to the storage
//     dtype straight into A fragments (NOTE [mma.sync fragments]); dS^T also goes to shared
//     memory, and after a barrier the warps compute dQ = dS K for the tile (row blocks x column
//     chunks spread over the warps) and add it into dq_accum with fp32 atomics. dK (times the
//     scale) and dV are rounded once at the end: into dk / dv when H == Hkv, else into
//     dk_expanded / dv_expanded at the query head (PyTorch's expand-then-sum for GQA).
//  3. dq = scale * dq_accum rounded; with GQA dk / dv = the fp32 sum of each group's expanded
//     rows, rounded once.
// Key tile 0 has the most query tiles and runs first (block order = longest first). The fp32
// atomics make dq's summation order vary from run to run (as PyTorch's flash backward without
// deterministic mode): dk and dv are deterministic, dq is not bit-reproducible.
#include "backends/cuda/kernels/attention_fa2.cuh"
#include "backends/cuda/kernels/attention_fa2_plan.h"
#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/plan.h"

namespace fullshard::cuda {
namespace {

using namespace fa2;

// dq_accum element (b, i, h, d): [B, rows, H, hd_pad].
struct DqAccum {
  float* p;
  int64_t rows, hd_pad;
};

__device__ __forceinline__ void add2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

template <class T, int HD>
__global__ void __launch_bounds__(bwd_threads(HD))
    attn_bwd_fa2(AttnLayout l, const T* __restrict__ dout, const T* __restrict__ q,
                 const T* __restrict__ k, const T* __restrict__ v, const float* __restrict__ lse,
                 const float* __restrict__ softmax_d, int64_t sd_ld, DqAccum dqa, void* dk,
                 void* dv, int ddk) {
  constexpr int BN = bwd_key_tile(HD), BM = bwd_query_tile(HD), W = bwd_warps(HD),
                LD = row_stride(HD), LDS = BM + 8;
  constexpr int KD = HD / 16, NQ = BM / 8, ND = HD / 8, QC = bwd_dq_chunk(HD);
  extern __shared__ __align__(128) unsigned char raw[];
  T* Ks = reinterpret_cast<T*>(raw);
  T* Vs = Ks + BN * LD;
  T* Qs = Vs + BN * LD;                                 // two buffers of BM x LD
  T* Gs = Qs + 2 * BM * LD;                             // dO, two buffers of BM x LD
  T* St = Gs + 2 * BM * LD;                             // dS^T [BN][LDS]
  float* Ls = reinterpret_cast<float*>(St + BN * LDS);  // lse * log2(e), two buffers of BM
  float* Ds = Ls + 2 * BM;                              // softmax_d, two buffers of BM

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
  const int64_t h = blockIdx.y, b = blockIdx.z, kvh = kv_head(h, l.group);
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t m_first = bwd_first_query_tile(blockIdx.x, HD), m_end = ceil_div(l.S, BM);
  const float sl2 = l.scale * 1.4426950408889634f;

  async_rows<HD>(Ks, LD, k, BN, [&](int r) {
    return k0 + r < l.S ? attn_k_index(l, b, k0 + r, kvh) : int64_t(-1);
  });
  async_rows<HD>(Vs, LD, v, BN, [&](int r) {
    return k0 + r < l.S ? attn_v_index(l, b, k0 + r, kvh) : int64_t(-1);
  });
  auto load_q = [&](int64_t m, int buf) {
    const int64_t i0 = m * BM;
    async_rows<HD>(Qs + buf * BM * LD, LD, q, BM, [&](int r) {
      return i0 + r < l.S ? attn_q_index(l, b, i0 + r, h) : int64_t(-1);
    });
    async_rows<HD>(Gs + buf * BM * LD, LD, dout, BM, [&](int r) {
      return i0 + r < l.S ? attn_o_index(l, b, i0 + r, h) : int64_t(-1);
    });
    for (int r = threadIdx.x; r < BM; r += blockDim.x) {  // rows past S: P = exp2(-inf) = 0
      const bool in = i0 + r < l.S;
      Ls[buf * BM + r] = in ? lse[attn_lse_index(l, b, h, i0 + r)] * 1.4426950408889634f : INFINITY;
      Ds[buf * BM + r] = in ? softmax_d[(b * l.H + h) * sd_ld + i0 + r] : 0.0f;
    }
  };
  load_q(m_first, 0);
  cp_async_commit();

  float gk[ND][4], gv[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) gk[n][e] = gv[n][e] = 0.0f;
  const int kr0 = warp * 16;  // the warp's first key row in the tile

  for (int64_t m = m_first; m < m_end; ++m) {
    const int buf = static_cast<int>((m - m_first) & 1);
    if (m + 1 < m_end) {
      load_q(m + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* Qb = Qs + buf * BM * LD;
    const T* Gb = Gs + buf * BM * LD;
    const float* Lb = Ls + buf * BM;
    const float* Db = Ds + buf * BM;
    const int64_t i0 = m * BM;

    // S^T = K Q^T and dP^T = V dO^T: 16 keys x BM queries per warp.
    float st[NQ][4], dpt[NQ][4];
#pragma unroll
    for (int n = 0; n < NQ; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.0f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
      uint32_t ka[4], va[4];
      ldmatrix_x4(ka, Ks + (kr0 + a_row(lane)) * LD + kd * 16 + a_col(lane));
      ldmatrix_x4(va, Vs + (kr0 + a_row(lane)) * LD + kd * 16 + a_col(lane));
#pragma unroll
      for (int np = 0; np < NQ / 2; ++np) {
        uint32_t qb[4], gb[4];
        ldmatrix_x4(qb, Qb + (np * 16 + b_row(lane)) * LD + kd * 16 + b_col(lane));
        ldmatrix_x4(gb, Gb + (np * 16 + b_row(lane)) * LD + kd * 16 + b_col(lane));
        mma16816<T>(st[2 * np], ka, qb[0], qb[1]);
        mma16816<T>(st[2 * np + 1], ka, qb[2], qb[3]);
        mma16816<T>(dpt[2 * np], va, gb[0], gb[1]);
        mma16816<T>(dpt[2 * np + 1], va, gb[2], gb[3]);
      }
    }

    // P^T (fp32, in st) and dS^T (fp32, in dpt): key row kr0 + g (+ 8), query column n 8 + 2 t4 (+
    // 1).
#pragma unroll
    for (int n = 0; n < NQ; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = n * 8 + 2 * t4 + (e & 1);
        const int64_t j = k0 + kr0 + g + (e >> 1) * 8, i = i0 + c;
        const float p = j <= i ? exp2f(fmaf(st[n][e], sl2, -Lb[c])) : 0.0f;
        st[n][e] = p;
        dpt[n][e] = p * (dpt[n][e] - Db[c]);
      }

      // dS^T to shared memory for dQ (16-bit pairs: columns 2 t4, 2 t4 + 1).
#pragma unroll
    for (int n = 0; n < NQ; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<uint32_t*>(St + (kr0 + g + r * 8) * LDS + n * 8 + 2 * t4) =
            pack2<T>(dpt[n][2 * r], dpt[n][2 * r + 1]);

        // dV += P^T dO and dK += dS^T Q (k = the tile's queries; dO and Q as [k][n] tiles).
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      uint32_t pa[4], sa[4];
      acc_to_a<T>(pa, st[2 * kk], st[2 * kk + 1]);
      acc_to_a<T>(sa, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < ND / 2; ++np) {
        uint32_t gb[4], qb[4];
        ldmatrix_x4_trans(gb, Gb + (kk * 16 + bt_row(lane)) * LD + np * 16 + bt_col(lane));
        ldmatrix_x4_trans(qb, Qb + (kk * 16 + bt_row(lane)) * LD + np * 16 + bt_col(lane));
        mma16816<T>(gv[2 * np], pa, gb[0], gb[1]);
        mma16816<T>(gv[2 * np + 1], pa, gb[2], gb[3]);
        mma16816<T>(gk[2 * np], sa, qb[0], qb[1]);
        mma16816<T>(gk[2 * np + 1], sa, qb[2], qb[3]);
      }
    }
    __syncthreads();  // dS^T of every warp is in shared memory

    // dQ (BM x HD) = dS K: units of 16 query rows x QC head dims, spread over the warps.
    constexpr int kRowBlocks = BM / 16, kUnits = kRowBlocks * (HD / QC);
    for (int u = warp; u < kUnits; u += W) {
      const int rb = u % kRowBlocks, ch = u / kRowBlocks;
      float dq[QC / 8][4];
#pragma unroll
      for (int n = 0; n < QC / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dq[n][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4_trans(a, St + (kk * 16 + at_row(lane)) * LDS + rb * 16 + at_col(lane));
#pragma unroll
        for (int np = 0; np < QC / 16; ++np) {
          uint32_t kb[4];
          ldmatrix_x4_trans(kb,
                            Ks + (kk * 16 + bt_row(lane)) * LD + ch * QC + np * 16 + bt_col(lane));
          mma16816<T>(dq[2 * np], a, kb[0], kb[1]);
          mma16816<T>(dq[2 * np + 1], a, kb[2], kb[3]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t i = i0 + rb * 16 + g + r * 8;
        if (i >= l.S) continue;
        float* row = dqa.p + ((b * dqa.rows + i) * l.H + h) * dqa.hd_pad + ch * QC + 2 * t4;
#pragma unroll
        for (int n = 0; n < QC / 8; ++n) add2(row + n * 8, dq[n][2 * r], dq[n][2 * r + 1]);
      }
    }
    __syncthreads();  // St and this buffer are free for the next tile
  }

  // dk / dv (or their expanded copies) are [B, S, H, hd] here: H == Hkv without GQA.
  const bool is_t = ddk == dcode_of<T>();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = k0 + kr0 + g + r * 8;
    if (j >= l.S) continue;
    const int64_t base = ((b * l.S + j) * l.H + h) * HD + 2 * t4;
#pragma unroll
    for (int n = 0; n < ND; ++n) {
      const float k0v = gk[n][2 * r] * l.scale, k1v = gk[n][2 * r + 1] * l.scale;
      const float v0v = gv[n][2 * r], v1v = gv[n][2 * r + 1];
      if (is_t) {
        *reinterpret_cast<uint32_t*>(static_cast<T*>(dk) + base + n * 8) = pack2<T>(k0v, k1v);
        *reinterpret_cast<uint32_t*>(static_cast<T*>(dv) + base + n * 8) = pack2<T>(v0v, v1v);
      } else {
        dev::store_f(dk, ddk, base + n * 8, k0v);
        dev::store_f(dk, ddk, base + n * 8 + 1, k1v);
        dev::store_f(dv, ddk, base + n * 8, v0v);
        dev::store_f(dv, ddk, base + n * 8 + 1, v1v);
      }
    }
  }
}

// softmax_d[b, h, s] = sum_d dO * O (fp32, as FlashAttention-2) and dq_accum row (b, s, h)
// zeroed (padding rows s >= S are never read): 8 lanes per (token, head) row, 16-byte loads
// (rows are whole multiples of 8 elements and the bases 16-byte aligned: dispatch.cc).
__global__ void attn_bwd_preprocess(AttnLayout l, const void* dout, int ddout, const void* o,
                                    int dto, float* softmax_d, int64_t sd_ld, DqAccum dqa) {
  const int sub = threadIdx.x & 7;
  const int64_t rows = l.B * l.S * l.H, groups = dev::grid_threads() / 8;
  for (int64_t r = dev::global_thread() / 8; r < rows + (groups - rows % groups) % groups;
       r += groups) {
    const bool in = r < rows;  // every lane of a group runs the shuffles
    float acc = 0.0f;
    if (in) {
      for (int64_t c = sub * 8; c < l.hd; c += 64) {
        float a[8], b[8];
        dev::load8(dout, ddout, r * l.hd + c, a);
        dev::load8(o, dto, r * l.hd + c, b);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc = fmaf(a[e], b[e], acc);
      }
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 4);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    if (!in) continue;
    const int64_t h = r % l.H, bs = r / l.H, b = bs / l.S, s = bs % l.S;
    if (sub == 0) softmax_d[(b * l.H + h) * sd_ld + s] = acc;
    float4* z = reinterpret_cast<float4*>(dqa.p + ((b * dqa.rows + s) * l.H + h) * dqa.hd_pad);
    for (int64_t c = sub; c < dqa.hd_pad / 4; c += 8) z[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// dq[b, s, h, d] = scale * dq_accum[b, s, h, d], rounded once.
__global__ void attn_bwd_dq_convert(AttnLayout l, DqAccum dqa, void* dq, int ddq) {
  const int64_t n = l.B * l.S * l.H * l.hd;
  for (int64_t e = dev::global_thread(); e < n; e += dev::grid_threads()) {
    const int64_t d = e % l.hd, bsh = e / l.hd, h = bsh % l.H, bs = bsh / l.H, b = bs / l.S,
                  s = bs % l.S;
    dev::store_f(dq, ddq, e, dqa.p[((b * dqa.rows + s) * l.H + h) * dqa.hd_pad + d] * l.scale);
  }
}

// GQA: out[b, s, kvh, d] = sum over the group's query heads of the expanded [B, S, H, hd] rows.
__global__ void attn_bwd_group_sum(AttnLayout l, const void* dke, const void* dve, int dte,
                                   void* dk, int ddk, void* dv, int ddv) {
  const int64_t n = l.B * l.S * l.Hkv * l.hd;
  for (int64_t e = dev::global_thread(); e < n; e += dev::grid_threads()) {
    const int64_t d = e % l.hd, bsk = e / l.hd, kvh = bsk % l.Hkv, bs = bsk / l.Hkv;
    const int64_t first = (bs * l.H + kvh * l.group) * l.hd + d;
    float sk = 0.0f, sv = 0.0f;
    for (int64_t g = 0; g < l.group; ++g) {
      sk += dev::load_f(dke, dte, first + g * l.hd);
      sv += dev::load_f(dve, dte, first + g * l.hd);
    }
    dev::store_f(dk, ddk, e, sk);
    dev::store_f(dv, ddv, e, sv);
  }
}

template <class T, int HD>
void run_bwd(const AttnLayout& l, const void* dout, const void* q, const void* k, const void* v,
             const void* o, int dt_o, const float* lse, const launch::AttnGrads& gr,
             cudaStream_t s) {
  const bool gqa = l.H != l.Hkv;
  const int smem = static_cast<int>(bwd_smem_bytes(HD));
  const DqAccum dqa{gr.dq_accum, gr.dq_accum_rows, gr.dq_accum_hd};
  const plan::Launch pre = plan::launch_1d(l.B * l.S * l.H * 8);
  attn_bwd_preprocess<<<pre.grid, pre.block, 0, s>>>(l, dout, dcode_of<T>(), o, dt_o, gr.softmax_d,
                                                     gr.softmax_d_ld, dqa);
  launch::check_launch("attention backward softmax_d and dq_accum zero");
  cudaFuncSetAttribute(attn_bwd_fa2<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const Grid3 g3 = bwd_grid(l);
  const dim3 grid(static_cast<unsigned>(g3.x), static_cast<unsigned>(g3.y),
                  static_cast<unsigned>(g3.z));
  void* dk = gqa ? gr.dk_expanded : gr.dk;
  void* dv = gqa ? gr.dv_expanded : gr.dv;
  const int ddk = gqa ? gr.dd_expanded : gr.ddk;
  attn_bwd_fa2<T, HD><<<grid, bwd_threads(HD), smem, s>>>(
      l, static_cast<const T*>(dout), static_cast<const T*>(q), static_cast<const T*>(k),
      static_cast<const T*>(v), lse, gr.softmax_d, gr.softmax_d_ld, dqa, dk, dv, ddk);
  launch::check_launch(
      "attention backward (FlashAttention-2; FULLSHARD_ATTENTION_KERNELS=wmma runs the WMMA "
      "kernels)");
  const plan::Launch c = plan::launch_1d(l.B * l.S * l.H * l.hd);
  attn_bwd_dq_convert<<<c.grid, c.block, 0, s>>>(l, dqa, gr.dq, gr.ddq);
  launch::check_launch("attention backward dq convert");
  if (gqa) {
    const plan::Launch gs = plan::launch_1d(l.B * l.S * l.Hkv * l.hd);
    attn_bwd_group_sum<<<gs.grid, gs.block, 0, s>>>(l, gr.dk_expanded, gr.dv_expanded,
                                                    gr.dd_expanded, gr.dk, gr.ddk, gr.dv, gr.ddv);
    launch::check_launch("attention backward GQA dk dv sum");
  }
}

template <class T>
void run_bwd_t(const AttnLayout& l, const void* dout, const void* q, const void* k, const void* v,
               const void* o, int dt_o, const float* lse, const launch::AttnGrads& g,
               cudaStream_t s) {
  switch (l.hd) {
    case 32: return run_bwd<T, 32>(l, dout, q, k, v, o, dt_o, lse, g, s);
    case 64: return run_bwd<T, 64>(l, dout, q, k, v, o, dt_o, lse, g, s);
    case 80: return run_bwd<T, 80>(l, dout, q, k, v, o, dt_o, lse, g, s);
    case 96: return run_bwd<T, 96>(l, dout, q, k, v, o, dt_o, lse, g, s);
    default: return run_bwd<T, 128>(l, dout, q, k, v, o, dt_o, lse, g, s);
  }
}

}  // namespace

// Called by launch::attention_backward for bf16 / fp16 q, k, v and dO (one dtype) with
// fa2::supports_head_dim, 16-byte aligned bases (O's included) and the flash temporaries
// (dispatch.cc).
void attention_backward_fa2(const AttnLayout& l, const void* dout, const void* q, const void* k,
                            const void* v, int dqkv, const void* o, int dt_o, const float* lse,
                            const launch::AttnGrads& g, cudaStream_t s) {
  if (dqkv == kBF16) return run_bwd_t<__nv_bfloat16>(l, dout, q, k, v, o, dt_o, lse, g, s);
  run_bwd_t<__half>(l, dout, q, k, v, o, dt_o, lse, g, s);
}

}  // namespace fullshard::cuda
