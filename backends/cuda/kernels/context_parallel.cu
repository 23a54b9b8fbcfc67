// Context parallelism's kernels: ring-attention rounds (NOTE [Ring attention on the CUDA
// backend] in context_parallel_plan.h), _SDPAMerger's fp32 merge (kSdpaMerge) and the ring
// backward's row-range add (kSeqRowsAdd), with the CPU backend's maths
// (backends/cpu/kernels/attention.cc, ring_attention.cc).
#include <cmath>

#include "backends/cuda/kernels/context_parallel_launch.h"
#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/plan.h"

namespace fullshard::cuda {
namespace {

using namespace dev;
constexpr int kPerLane = 8;  // head_dim <= 256: 8 elements a lane
constexpr unsigned kThreads = plan::kRingWarps * 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Lane `lane`'s elements of the row at `base` (0 past head_dim).
__device__ __forceinline__ void load_row(const void* p, int dt, int64_t base, int64_t hd, int lane,
                                         float (&r)[kPerLane]) {
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    r[e] = d < hd ? load_f(p, dt, base + d) : 0.0f;
  }
}

__device__ __forceinline__ float warp_dot(const float (&a)[kPerLane], const float (&b)[kPerLane]) {
  float s = 0;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) s += a[e] * b[e];
  return warp_sum(s);
}

__device__ __forceinline__ int64_t first_row(int warp) {
  return static_cast<int64_t>(blockIdx.x) * plan::kRingWarps + warp;
}
__device__ __forceinline__ int64_t row_step() {
  return static_cast<int64_t>(gridDim.x) * plan::kRingWarps;
}

// One warp per (batch, head, query row): online softmax over the keys (all of them, or the
// causal prefix), O and the row's logsumexp.
__global__ void __launch_bounds__(kThreads)
    ring_forward_kernel(RingAttnLayout l, const void* q, const void* k, const void* v, int dt,
                        void* o, int dout, float* lse) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.y / l.H, h = blockIdx.y % l.H, kvh = h / l.group;
  for (int64_t i = first_row(warp); i < l.Sq; i += row_step()) {
    float qr[kPerLane], acc[kPerLane], kr[kPerLane], vr[kPerLane];
    load_row(q, dt, ring_q_index(l, b, i, h), l.hd, lane, qr);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[e] = 0;
    float m = -INFINITY, sum = 0;
    const int64_t keys = l.causal ? min(i + 1, l.Skv) : l.Skv;
    for (int64_t j = 0; j < keys; ++j) {
      load_row(k, dt, ring_kv_index(l, b, j, kvh), l.hd, lane, kr);
      const float sc = warp_dot(qr, kr) * l.scale;
      const float mn = fmaxf(m, sc);
      const float c = m == -INFINITY ? 0.0f : expf(m - mn), p = expf(sc - mn);
      load_row(v, dt, ring_kv_index(l, b, j, kvh), l.hd, lane, vr);
      sum = sum * c + p;
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) acc[e] = acc[e] * c + p * vr[e];
      m = mn;
    }
    const float inv = sum > 0 ? 1.0f / sum : 0.0f;
    const int64_t ob = ring_out_index(l, b, i, h);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < l.hd) store_f(o, dout, ob + d, acc[e] * inv);
    }
    if (lane == 0) lse[ring_lse_index(l, b, h, i)] = keys > 0 ? m + logf(sum) : -INFINITY;
  }
}

// One warp per (batch, head, query row): delta = rowsum(dO O) into softmax_d, then
// dq = scale sum_j P (dP - delta) k_j over the row's keys.
__global__ void __launch_bounds__(kThreads)
    ring_backward_dq_kernel(RingAttnLayout l, const void* dout, int ddo, const void* q,
                            const void* k, const void* v, int dt, const void* o, int dto,
                            const float* lse, void* dq, int ddq, float* sd) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.y / l.H, h = blockIdx.y % l.H, kvh = h / l.group;
  for (int64_t i = first_row(warp); i < l.Sq; i += row_step()) {
    float qr[kPerLane], gr[kPerLane], t[kPerLane], acc[kPerLane];
    const int64_t qb = ring_q_index(l, b, i, h);
    load_row(q, dt, qb, l.hd, lane, qr);
    load_row(dout, ddo, qb, l.hd, lane, gr);  // dO and O: q's layout
    load_row(o, dto, qb, l.hd, lane, t);
    const float delta = warp_dot(gr, t);
    if (lane == 0) sd[(b * l.H + h) * l.sd_ld + i] = delta;
    const float li = lse[ring_lse_index(l, b, h, i)];
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[e] = 0;
    const int64_t keys = l.causal ? min(i + 1, l.Skv) : l.Skv;
    for (int64_t j = 0; j < keys; ++j) {
      const int64_t kb = ring_kv_index(l, b, j, kvh);
      load_row(k, dt, kb, l.hd, lane, t);
      const float p = expf(warp_dot(qr, t) * l.scale - li);
      float vr[kPerLane];
      load_row(v, dt, kb, l.hd, lane, vr);
      const float ds = p * (warp_dot(gr, vr) - delta);
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) acc[e] += ds * t[e];
    }
    const int64_t ob = ring_out_index(l, b, i, h);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < l.hd) store_f(dq, ddq, ob + d, acc[e] * l.scale);
    }
  }
}

// One warp per (batch, kv head, key row): dk = scale sum P (dP - delta) q_i and dv = sum P dO_i
// over the query rows of every head of the kv head's group (deltas from softmax_d).
__global__ void __launch_bounds__(kThreads)
    ring_backward_dkv_kernel(RingAttnLayout l, const void* dout, int ddo, const void* q,
                             const void* k, const void* v, int dt, const float* lse,
                             const float* sd, void* dk, int ddk, void* dv, int ddv) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.y / l.Hkv, kvh = blockIdx.y % l.Hkv;
  for (int64_t j = first_row(warp); j < l.Skv; j += row_step()) {
    float kr[kPerLane], vr[kPerLane], gk[kPerLane], gv[kPerLane];
    const int64_t kb = ring_kv_index(l, b, j, kvh);
    load_row(k, dt, kb, l.hd, lane, kr);
    load_row(v, dt, kb, l.hd, lane, vr);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) gk[e] = gv[e] = 0;
    for (int64_t hh = 0; hh < l.group; ++hh) {
      const int64_t h = kvh * l.group + hh;
      for (int64_t i = l.causal ? j : 0; i < l.Sq; ++i) {
        float qr[kPerLane], gr[kPerLane];
        const int64_t qb = ring_q_index(l, b, i, h);
        load_row(q, dt, qb, l.hd, lane, qr);
        load_row(dout, ddo, qb, l.hd, lane, gr);
        const float p = expf(warp_dot(qr, kr) * l.scale - lse[ring_lse_index(l, b, h, i)]);
        const float ds = p * (warp_dot(gr, vr) - sd[(b * l.H + h) * l.sd_ld + i]);
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) {
          gk[e] += ds * qr[e];
          gv[e] += p * gr[e];
        }
      }
    }
    const int64_t ob = ring_kv_out_index(l, b, j, kvh);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < l.hd) {
        store_f(dk, ddk, ob + d, gk[e] * l.scale);
        store_f(dv, ddv, ob + d, gv[e]);
      }
    }
  }
}

// _SDPAMerger._merge_one over the block's rows (out and lse already copied to out2 / lse2).
__global__ void sdpa_merge_kernel(SdpaMergePlan p, const float* out, const float* lse,
                                  const void* block, const float* block_lse, float* out2,
                                  float* lse2) {
  const int64_t hd = p.head_dim, D = p.heads * hd;
  const int64_t total = p.batch * p.block_len * D;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t e = idx % hd, h = (idx / hd) % p.heads, s = (idx / D) % p.block_len;
    const int64_t b = idx / (D * p.block_len), pos = p.first_row + s;
    const float old = lse[(b * p.heads + h) * p.len + pos];
    const float bl = block_lse[(b * p.heads + h) * p.block_len + s];
    const float w = 1.0f / (1.0f + expf(-(bl - old)));  // sigmoid(block_lse - lse)
    const int64_t oi = (b * p.len + pos) * D + h * hd + e;
    const float a = out[oi];
    out2[oi] = a - w * (a - load_f(block, p.block_dtype, (b * p.block_len + s) * D + h * hd + e));
    if (e == 0) {
      const float x =
          old - bl;  // lse - logsigmoid(x), logsigmoid(x) = min(x, 0) - log1p(exp(-|x|))
      lse2[(b * p.heads + h) * p.len + pos] = old - (fminf(x, 0.0f) - log1pf(expf(-fabsf(x))));
    }
  }
}

__global__ void seq_rows_add_kernel(plan::SeqRowsPlan p, void* dst, const void* src) {
  const int64_t total = p.batch * p.n * p.width;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t w = idx % p.width, s = (idx / p.width) % p.n, b = idx / (p.width * p.n);
    const int64_t di = (b * p.rows + p.begin + s) * p.width + w;
    store_f(dst, p.dst_dtype, di, load_f(dst, p.dst_dtype, di) + load_f(src, p.src_dtype, idx));
  }
}

}  // namespace

namespace launch {

void ring_attention_forward(const RingAttnLayout& l, const void* q, const void* k, const void* v,
                            int dt, void* o, int dout, float* lse, cudaStream_t s) {
  if (l.B * l.H == 0 || l.Sq == 0) return;
  const dim3 grid(plan::ring_grid(l.Sq), static_cast<unsigned>(l.B * l.H));
  ring_forward_kernel<<<grid, kThreads, 0, s>>>(l, q, k, v, dt, o, dout, lse);
  check_launch("ring attention forward");
}

void ring_attention_backward(const RingAttnLayout& l, const void* dout, int ddo, const void* q,
                             const void* k, const void* v, int dt, const void* o, int dto,
                             const float* lse, const RingGrads& g, cudaStream_t s) {
  if (l.B * l.H == 0) return;
  if (l.Sq > 0) {
    const dim3 grid(plan::ring_grid(l.Sq), static_cast<unsigned>(l.B * l.H));
    ring_backward_dq_kernel<<<grid, kThreads, 0, s>>>(l, dout, ddo, q, k, v, dt, o, dto, lse, g.dq,
                                                      g.ddq, g.softmax_d);
    check_launch("ring attention backward dq");
  }
  if (l.Skv > 0) {
    const dim3 grid(plan::ring_grid(l.Skv), static_cast<unsigned>(l.B * l.Hkv));
    ring_backward_dkv_kernel<<<grid, kThreads, 0, s>>>(l, dout, ddo, q, k, v, dt, lse, g.softmax_d,
                                                       g.dk, g.ddk, g.dv, g.ddv);
    check_launch("ring attention backward dk dv");
  }
}

void sdpa_merge(const SdpaMergePlan& p, const float* out, const float* lse, const void* block,
                const float* block_lse, float* out2, float* lse2, cudaStream_t s) {
  const int64_t D = p.heads * p.head_dim;
  const size_t out_bytes = static_cast<size_t>(p.batch * p.len * D) * sizeof(float);
  const size_t lse_bytes = static_cast<size_t>(p.batch * p.heads * p.len) * sizeof(float);
  if (out2 != out && out_bytes > 0 &&
      cudaMemcpyAsync(out2, out, out_bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess)
    check_launch("sdpa merge copy of out");
  if (lse2 != lse && lse_bytes > 0 &&
      cudaMemcpyAsync(lse2, lse, lse_bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess)
    check_launch("sdpa merge copy of lse");
  const int64_t total = p.batch * p.block_len * D;
  if (total == 0) return;
  const plan::Launch l = plan::launch_1d(total);
  sdpa_merge_kernel<<<l.grid, l.block, 0, s>>>(p, out, lse, block, block_lse, out2, lse2);
  check_launch("sdpa merge");
}

void seq_rows_add(const plan::SeqRowsPlan& p, void* dst, const void* src, cudaStream_t s) {
  const int64_t total = p.batch * p.n * p.width;
  if (total == 0) return;
  const plan::Launch l = plan::launch_1d(total);
  seq_rows_add_kernel<<<l.grid, l.block, 0, s>>>(p, dst, src);
  check_launch("seq rows add");
}

}  // namespace launch
}  // namespace fullshard::cuda
