// The mixture-of-experts router's kernels on the GPU (NOTE [MoE kernels on the GPU] in
// moe_plan.h): the CPU kernels' arithmetic (backends/cpu/kernels/moe_router.cc) one token row per
// thread, in the same order, compiled without FMA contraction (CMakeLists.txt), so every result
// that takes no exp is the CPU's bits.
#include <cstdint>

#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/moe_index.h"
#include "backends/cuda/kernels/moe_launch.h"

namespace fullshard::cuda::launch {

namespace {

using dev::load_f;
using dev::store_f;

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 ? (b > 0 ? b : 1) : 65535);  // grid-stride beyond
}

#define FS_GRID_STRIDE(i, n) \
  for (int64_t i = dev::global_thread(); i < (n); i += dev::grid_threads())

// Row max, sum of exp(x - max) in double over the fp32 exps, then each exp times the fp32
// reciprocal: the CPU's order.
__global__ void softmax_kernel(const void* x, int dx, void* y, int dy, int64_t N, int64_t E) {
  FS_GRID_STRIDE(n, N) {
    const int64_t base = n * E;
    float m = load_f(x, dx, base);
    for (int64_t e = 1; e < E; ++e) m = fmaxf(m, load_f(x, dx, base + e));
    double s = 0;
    for (int64_t e = 0; e < E; ++e) s += static_cast<double>(expf(load_f(x, dx, base + e) - m));
    const float inv = static_cast<float>(1.0 / s);
    for (int64_t e = 0; e < E; ++e) store_f(y, dy, base + e, expf(load_f(x, dx, base + e) - m) * inv);
  }
}

__global__ void softmax_backward_kernel(const void* g, int dg, const void* y, int dy, void* o,
                                        int dout, int64_t N, int64_t E) {
  FS_GRID_STRIDE(n, N) {
    const int64_t base = n * E;
    double dot = 0;
    for (int64_t e = 0; e < E; ++e)
      dot += static_cast<double>(load_f(g, dg, base + e)) * load_f(y, dy, base + e);
    const float d = static_cast<float>(dot);
    for (int64_t e = 0; e < E; ++e)
      store_f(o, dout, base + e, load_f(y, dy, base + e) * (load_f(g, dg, base + e) - d));
  }
}

__global__ void sigmoid_kernel(const void* x, int dx, void* y, int dy, int64_t n) {
  FS_GRID_STRIDE(i, n) store_f(y, dy, i, 1.0f / (1.0f + expf(-load_f(x, dx, i))));
}

__global__ void sigmoid_backward_kernel(const void* g, int dg, const void* y, int dy, void* o,
                                        int dout, int64_t n) {
  FS_GRID_STRIDE(i, n) {
    const float yv = load_f(y, dy, i);
    store_f(o, dout, i, load_f(g, dg, i) * yv * (1.0f - yv));
  }
}

// The k-th pick is the first element after the (k-1)-th in moe_topk_before's total order.
__global__ void topk_kernel(const void* x, int dx, void* vals, int dv, int64_t* idx, int64_t N,
                            int64_t E, int64_t K) {
  FS_GRID_STRIDE(n, N) {
    const int64_t base = n * E;
    float pv = 0.0f;
    int64_t pi = -1;
    for (int64_t k = 0; k < K; ++k) {
      float bv = 0.0f;
      int64_t bi = -1;
      for (int64_t e = 0; e < E; ++e) {
        const float v = load_f(x, dx, base + e);
        if (pi >= 0 && !moe_topk_before(pv, pi, v, e)) continue;  // taken already
        if (bi < 0 || moe_topk_before(v, e, bv, bi)) bv = v, bi = e;
      }
      store_f(vals, dv, n * K + k, bv);
      idx[n * K + k] = bi;
      pv = bv;
      pi = bi;
    }
  }
}

__global__ void topk_backward_kernel(const void* g, int dg, const int64_t* idx, void* o, int dout,
                                     int64_t N, int64_t E, int64_t K) {
  FS_GRID_STRIDE(i, N * E) {
    const int64_t n = i / E, e = i - n * E;
    float v = 0.0f;
    for (int64_t k = 0; k < K; ++k)  // the last k naming e wins, as the CPU's loop
      if (idx[n * K + k] == e) v = load_f(g, dg, n * K + k);
    store_f(o, dout, i, v);
  }
}

__global__ void route_norm_kernel(const void* x, int dx, void* y, int dy, void* den, int dden,
                                  int64_t N, int64_t K) {
  FS_GRID_STRIDE(n, N) {
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += load_f(x, dx, n * K + k);
    const float d = static_cast<float>(sum) + 1e-20f;
    for (int64_t k = 0; k < K; ++k) store_f(y, dy, n * K + k, load_f(x, dx, n * K + k) / d);
    store_f(den, dden, n, d);
  }
}

__global__ void route_norm_backward_kernel(const void* g, int dg, const void* x, int dx,
                                           const void* den, int dden, void* o, int dout, int64_t N,
                                           int64_t K) {
  FS_GRID_STRIDE(n, N) {
    double gs = 0;
    for (int64_t k = 0; k < K; ++k)
      gs += static_cast<double>(load_f(g, dg, n * K + k)) * load_f(x, dx, n * K + k);
    const double dd = load_f(den, dden, n);
    for (int64_t k = 0; k < K; ++k)
      store_f(o, dout, n * K + k,
              static_cast<float>(load_f(g, dg, n * K + k) / dd - gs / (dd * dd)));
  }
}

// One block: integer counts in shared memory (exact in any order), then rounded once.
__global__ void __launch_bounds__(1024) histogram_kernel(const int64_t* idx, int64_t n,
                                                         void* counts, int dc, int64_t E) {
  extern __shared__ int hist[];
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (idx[i] >= 0 && idx[i] < E) atomicAdd(&hist[idx[i]], 1);  // histc drops the rest
  __syncthreads();
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x)
    store_f(counts, dc, e, static_cast<float>(hist[e]));
}

// NOTE [Capacity factor] (core/model/moe_routing.h), the CPU kernel's rule: a thread per slot
// counts its expert's slots ranked ahead of it (a higher fp32 score, or an equal one of a lower
// slot; policy 1: a lower slot) and keeps its expert when fewer than `cap` are. O((N K)^2)
// comparisons: correct first (docs/cuda-kernels.md).
__global__ void expert_capacity_kernel(const float* score, const int64_t* idx, int64_t* y,
                                       int64_t n, int64_t E, int64_t cap, int policy) {
  FS_GRID_STRIDE(i, n) {
    const int64_t e = idx[i];
    int64_t ahead = 0;
    if (e >= 0 && e < E) {
      const float si = score[i];
      for (int64_t j = 0; j < n && ahead < cap; ++j)
        if (j != i && idx[j] == e &&
            (policy == 1 ? j < i : (score[j] > si || (score[j] == si && j < i))))
          ++ahead;
    }
    y[i] = e >= 0 && e < E && ahead >= cap ? E : e;
  }
}

__global__ void weighted_sum_kernel(const void* w, int dw, const void* y, int dy, void* o,
                                    int dout, int64_t N, int64_t K, int64_t D) {
  FS_GRID_STRIDE(i, N * D) {
    const int64_t n = i / D, d = i - n * D;
    double s = 0;
    for (int64_t k = 0; k < K; ++k)
      s += static_cast<double>(load_f(w, dw, n * K + k)) * load_f(y, dy, (n * K + k) * D + d);
    store_f(o, dout, i, static_cast<float>(s));
  }
}

// g_w[n, k] = <g[n], y[n, k]> summed in double in d order (a thread per (n, k), the CPU's bits).
__global__ void weighted_sum_grad_w_kernel(const void* g, int dg, const void* y, int dy, void* gw,
                                           int dgw, int64_t N, int64_t K, int64_t D) {
  FS_GRID_STRIDE(i, N * K) {
    const int64_t n = i / K;
    double s = 0;
    for (int64_t d = 0; d < D; ++d)
      s += static_cast<double>(load_f(g, dg, n * D + d)) * load_f(y, dy, i * D + d);
    store_f(gw, dgw, i, static_cast<float>(s));
  }
}

// g_y[n, k, d] = w[n, k] g[n, d] in fp32.
__global__ void weighted_sum_grad_y_kernel(const void* g, int dg, const void* w, int dw, void* gy,
                                           int dgy, int64_t N, int64_t K, int64_t D) {
  FS_GRID_STRIDE(i, N * K * D) {
    const int64_t nk = i / D, d = i - nk * D, n = nk / K;
    store_f(gy, dgy, i, load_f(w, dw, nk) * load_f(g, dg, n * D + d));
  }
}

}  // namespace

void moe_softmax(const void* x, int dx, void* y, int dy, int64_t N, int64_t E, cudaStream_t s) {
  if (N == 0) return;
  softmax_kernel<<<blocks_for(N), kThreads, 0, s>>>(x, dx, y, dy, N, E);
  check_launch("moe_softmax");
}
void moe_softmax_backward(const void* g, int dg, const void* y, int dy, void* o, int dout,
                          int64_t N, int64_t E, cudaStream_t s) {
  if (N == 0) return;
  softmax_backward_kernel<<<blocks_for(N), kThreads, 0, s>>>(g, dg, y, dy, o, dout, N, E);
  check_launch("moe_softmax_backward");
}
void moe_sigmoid(const void* x, int dx, void* y, int dy, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  sigmoid_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, dx, y, dy, n);
  check_launch("moe_sigmoid");
}
void moe_sigmoid_backward(const void* g, int dg, const void* y, int dy, void* o, int dout,
                          int64_t n, cudaStream_t s) {
  if (n == 0) return;
  sigmoid_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(g, dg, y, dy, o, dout, n);
  check_launch("moe_sigmoid_backward");
}
void moe_topk(const void* x, int dx, void* vals, int dv, int64_t* idx, int64_t N, int64_t E,
              int64_t K, cudaStream_t s) {
  if (N == 0 || K == 0) return;
  topk_kernel<<<blocks_for(N), kThreads, 0, s>>>(x, dx, vals, dv, idx, N, E, K);
  check_launch("moe_topk");
}
void moe_topk_backward(const void* g, int dg, const int64_t* idx, void* o, int dout, int64_t N,
                       int64_t E, int64_t K, cudaStream_t s) {
  if (N == 0) return;
  topk_backward_kernel<<<blocks_for(N * E), kThreads, 0, s>>>(g, dg, idx, o, dout, N, E, K);
  check_launch("moe_topk_backward");
}
void moe_route_norm(const void* x, int dx, void* y, int dy, void* den, int dden, int64_t N,
                    int64_t K, cudaStream_t s) {
  if (N == 0) return;
  route_norm_kernel<<<blocks_for(N), kThreads, 0, s>>>(x, dx, y, dy, den, dden, N, K);
  check_launch("moe_route_norm");
}
void moe_route_norm_backward(const void* g, int dg, const void* x, int dx, const void* den,
                             int dden, void* o, int dout, int64_t N, int64_t K, cudaStream_t s) {
  if (N == 0) return;
  route_norm_backward_kernel<<<blocks_for(N), kThreads, 0, s>>>(g, dg, x, dx, den, dden, o, dout,
                                                                N, K);
  check_launch("moe_route_norm_backward");
}
void moe_histogram(const int64_t* idx, int64_t n, void* counts, int dc, int64_t E,
                   cudaStream_t s) {
  histogram_kernel<<<1, 1024, static_cast<size_t>(E) * sizeof(int), s>>>(idx, n, counts, dc, E);
  check_launch("moe_histogram");
}
void moe_expert_capacity(const float* score, const int64_t* idx, int64_t* y, int64_t n, int64_t E,
                         int64_t cap, int policy, cudaStream_t s) {
  if (n == 0) return;
  expert_capacity_kernel<<<blocks_for(n), kThreads, 0, s>>>(score, idx, y, n, E, cap, policy);
  check_launch("moe_expert_capacity");
}
void moe_weighted_sum(const void* w, int dw, const void* y, int dy, void* o, int dout, int64_t N,
                      int64_t K, int64_t D, cudaStream_t s) {
  if (N * D == 0) return;
  weighted_sum_kernel<<<blocks_for(N * D), kThreads, 0, s>>>(w, dw, y, dy, o, dout, N, K, D);
  check_launch("moe_weighted_sum");
}
void moe_weighted_sum_backward(const void* g, int dg, const void* w, int dw, const void* y, int dy,
                               void* gw, int dgw, void* gy, int dgy, int64_t N, int64_t K,
                               int64_t D, cudaStream_t s) {
  if (N * K == 0) return;
  weighted_sum_grad_w_kernel<<<blocks_for(N * K), kThreads, 0, s>>>(g, dg, y, dy, gw, dgw, N, K, D);
  check_launch("moe_weighted_sum_backward (g_w)");
  if (D == 0) return;
  weighted_sum_grad_y_kernel<<<blocks_for(N * K * D), kThreads, 0, s>>>(g, dg, w, dw, gy, dgy, N, K,
                                                                       D);
  check_launch("moe_weighted_sum_backward (g_y)");
}

}  // namespace fullshard::cuda::launch
