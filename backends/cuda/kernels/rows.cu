// Embeddings (gather, deterministic scatter-add), position embedding, RoPE, log_softmax /
// nll_loss and the foreach sums of clipping. Contracts: docs/kernels.md.
#include <algorithm>

#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/online_softmax.h"
#include "backends/cuda/kernels/plan.h"

namespace fullshard::cuda {
namespace {

using namespace dev;

// ---- embeddings. A device kernel cannot throw: an id outside [0, V) yields a NaN row in the
// forward and is skipped by the backward (the CPU kernel throws; docs/cuda-kernels.md). A
// vocab-parallel shard (vocab_start >= 0: rows [vocab_start, vocab_start + V) of the table, NOTE
// [Tensor-parallel plan] in core/model/tensor_parallel.cc) gives other ids zero rows and no
// gradient, as embedding.cc.
__global__ void embedding_kernel(const int64_t* ids, const void* w, int dw, void* y, int dy,
                                 int64_t n, int64_t V, int64_t D, int64_t vocab_start) {
  const int64_t total = n * D;
  const float other = vocab_start >= 0 ? 0.0f : __int_as_float(0x7fc00000);
  const int64_t first = vocab_start >= 0 ? vocab_start : 0;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t t = i / D, d = i - t * D, id = ids[t] - first;
    store_f(y, dy, i, id >= 0 && id < V ? load_f(w, dw, id * D + d) : other);
  }
}

// NOTE [Deterministic embedding backward]: gW[v] = sum of g[t] over tokens t with ids[t] = v,
// added in fp32 in token order from zero, exactly as embedding.cc, with no scratch memory. The
// block of token t does nothing unless t is the first occurrence of its id; the first
// occurrence's block then walks every later token in order, summing the matching rows into an
// fp32 row in shared memory, and stores it once (rounding once to a bf16 / fp16 gW). Rows of
// unused ids are zeroed by a memset before. O(n^2) id comparisons, which at n = 64k tokens is a
// few milliseconds of L2-resident reads: cheap next to the step, and exact.
constexpr int kEmbBlock = 256;
// Row v of gW is id first + v (first: a vocab-parallel shard's vocab_start, else 0).
__global__ void embedding_backward_kernel(const void* g, int dg, const int64_t* ids, void* gw,
                                          int dgw, int64_t n, int64_t V, int64_t D, int64_t first) {
  extern __shared__ float acc[];  // [D]
  __shared__ int match[kEmbBlock];
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const int64_t id = ids[t], v = id - first;
    if (v < 0 || v >= V) continue;  // uniform across the block
    int earlier = 0;
    for (int64_t j = threadIdx.x; j < t; j += blockDim.x) earlier |= ids[j] == id;
    if (__syncthreads_or(earlier)) continue;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) acc[d] = 0.0f;
    for (int64_t base = t; base < n; base += blockDim.x) {
      const int64_t j = base + threadIdx.x;
      match[threadIdx.x] = j < n && ids[j] == id;
      __syncthreads();
      const int64_t cnt = min(static_cast<int64_t>(blockDim.x), n - base);
      for (int64_t k = 0; k < cnt; ++k)
        if (match[k])
          for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
            acc[d] = __fadd_rn(acc[d], load_f(g, dg, (base + k) * D + d));
      __syncthreads();
    }
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) store_f(gw, dgw, v * D + d, acc[d]);
    __syncthreads();
  }
}

__global__ void position_embedding_kernel(const void* x, int dx, const void* wpe, int dw, void* y,
                                          int dy, int64_t total, int64_t S, int64_t D, int64_t p0) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t r = i / D, d = i - r * D;
    store_f(y, dy, i, __fadd_rn(load_f(x, dx, i), load_f(wpe, dw, (p0 + r % S) * D + d)));
  }
}

__global__ void position_embedding_backward_kernel(const void* g, int dg, void* gw, int dgw,
                                                   int64_t batch, int64_t S, int64_t P, int64_t D,
                                                   int64_t p0) {
  for (int64_t i = global_thread(); i < P * D; i += grid_threads()) {
    const int64_t s = i / D, d = i - s * D;
    double acc = 0;
    if (s >= p0 && s < p0 + S)
      for (int64_t b = 0; b < batch; ++b) acc += load_f(g, dg, (b * S + s - p0) * D + d);
    store_f(gw, dgw, i, static_cast<float>(acc));
  }
}

// NOTE [One-pass log_softmax]: a block per row. Each thread keeps an online (max, sum of exp)
// pair over its elements (the sum in double, rescaled by exp(old max - new max) when its max
// grows), the block combines the pairs in a fixed order, and a second sweep writes x - lse: two
// reads and one write of the row where the three-sweep form read it three times. Rows whose x and
// y starts are 16-byte aligned (every row when V % 8 == 0 and the bases are: the 1B model's
// [8192, 128256]) go 8 elements an access (two float4 for fp32, one 16-byte load for 16-bit
// dtypes), two vectors in flight a thread; the rest element by element. Each term is
// expf(x - m_t) * exp(m_t - M) instead of the CPU's expf(x - M): the same sum to a few fp32 ulps,
// inside the op's 3.2e-5 tolerance (docs/cuda-kernels.md); deterministic run to run. The pair is
// OnlineSum (online_softmax.h), which the host test runs against loss.cc's sum.
constexpr int kCeUnroll = 2;  // 8-element vectors in flight per thread

__device__ __forceinline__ bool rows_aligned16(const void* a, const void* b,
                                               const void* c = nullptr) {
  return ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
           reinterpret_cast<uintptr_t>(c)) &
          15) == 0;
}
__device__ __forceinline__ const void* row_ptr(const void* p, int dt, int64_t off) {
  return static_cast<const char*>(p) + off * (dt == kF32 ? 4 : 2);
}

__global__ void __launch_bounds__(1024)
    log_softmax_kernel(const void* x, int dx, void* y, int dy, int64_t rows, int64_t V) {
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * V;
    const bool vec = rows_aligned16(row_ptr(x, dx, base), row_ptr(y, dy, base));
    const int64_t body = vec ? V / 8 * 8 : 0;  // elements [0, body) by 8-element vectors
    OnlineSum acc;
    for (int64_t j0 = static_cast<int64_t>(threadIdx.x) * 8; j0 < body;
         j0 += kCeUnroll * 8 * blockDim.x) {
      float v[kCeUnroll][8];
#pragma unroll
      for (int u = 0; u < kCeUnroll; ++u) {
        const int64_t j = j0 + static_cast<int64_t>(u) * 8 * blockDim.x;
        if (j < body) load8(x, dx, base + j, v[u]);
      }
#pragma unroll
      for (int u = 0; u < kCeUnroll; ++u)
        if (j0 + static_cast<int64_t>(u) * 8 * blockDim.x < body) acc.add(v[u], 8);
    }
    for (int64_t j = body + threadIdx.x; j < V; j += blockDim.x) {
      const float v = load_f(x, dx, base + j);
      acc.add(&v, 1);
    }
    const float mx = block_max(acc.m, fscratch);
    const double sum = block_sum(acc.scaled_to(mx), dscratch);
    const float lse = __fadd_rn(mx, static_cast<float>(log(sum)));
    for (int64_t j = static_cast<int64_t>(threadIdx.x) * 8; j < body; j += 8 * blockDim.x) {
      float v[8];
      load8(x, dx, base + j, v);
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = __fsub_rn(v[k], lse);
      store8(y, dy, base + j, v);
    }
    for (int64_t j = body + threadIdx.x; j < V; j += blockDim.x)
      store_f(y, dy, base + j, __fsub_rn(load_f(x, dx, base + j), lse));
  }
}

// gx = g - exp(y) * sum(g): the row sum (double) in one sweep, then gx in a second, both by
// 8-element vectors where the row's g, y and gx starts are 16-byte aligned (NOTE [One-pass
// log_softmax]). Per-element math as loss.cc.
__global__ void __launch_bounds__(1024)
    log_softmax_backward_kernel(const void* g, int dg, const void* y, int dy, void* gx, int dgx,
                                int64_t rows, int64_t V) {
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * V;
    const bool vec =
        rows_aligned16(row_ptr(g, dg, base), row_ptr(y, dy, base), row_ptr(gx, dgx, base));
    const int64_t body = vec ? V / 8 * 8 : 0;
    double s = 0;
    for (int64_t j0 = static_cast<int64_t>(threadIdx.x) * 8; j0 < body;
         j0 += kCeUnroll * 8 * blockDim.x) {
      float v[kCeUnroll][8];
#pragma unroll
      for (int u = 0; u < kCeUnroll; ++u) {
        const int64_t j = j0 + static_cast<int64_t>(u) * 8 * blockDim.x;
        if (j < body) {
          load8(g, dg, base + j, v[u]);
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k) v[u][k] = 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kCeUnroll; ++u)
#pragma unroll
        for (int k = 0; k < 8; ++k) s += v[u][k];
    }
    for (int64_t j = body + threadIdx.x; j < V; j += blockDim.x) s += load_f(g, dg, base + j);
    const float sf = static_cast<float>(block_sum(s, scratch));
    for (int64_t j = static_cast<int64_t>(threadIdx.x) * 8; j < body; j += 8 * blockDim.x) {
      float gv[8], yv[8];
      load8(g, dg, base + j, gv);
      load8(y, dy, base + j, yv);
#pragma unroll
      for (int k = 0; k < 8; ++k) gv[k] = __fsub_rn(gv[k], __fmul_rn(expf(yv[k]), sf));
      store8(gx, dgx, base + j, gv);
    }
    for (int64_t j = body + threadIdx.x; j < V; j += blockDim.x)
      store_f(gx, dgx, base + j,
              __fsub_rn(load_f(g, dg, base + j), __fmul_rn(expf(load_f(y, dy, base + j)), sf)));
  }
}

// nll_loss (mean over counted rows) in one block. A label outside [0, V) other than the ignore
// index makes the loss NaN (the CPU kernel throws).
__global__ void __launch_bounds__(1024)
    nll_loss_kernel(const void* lp, int dlp, const int64_t* labels, void* loss, void* total_weight,
                    int dloss, int64_t rows, int64_t V, int64_t ignore) {
  __shared__ double scratch[32];
  double sum = 0, count = 0, bad = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t y = labels[r];
    if (y == ignore) continue;
    if (y < 0 || y >= V) {
      bad += 1;
      continue;
    }
    sum += load_f(lp, dlp, r * V + y);
    count += 1;
  }
  sum = block_sum(sum, scratch);
  count = block_sum(count, scratch);
  bad = block_sum(bad, scratch);
  if (threadIdx.x == 0) {
    store_f(loss, dloss, 0,
            count > 0 && bad == 0 ? static_cast<float>(-sum / count) : __int_as_float(0x7fc00000));
    store_f(total_weight, dloss, 0, static_cast<float>(count));
  }
}

// NOTE [nll_loss backward as a scatter]: the gradient is -g / total_weight at (r, labels[r]) for
// every counted row and 0 elsewhere. The zeros are a memset (all-zero bits are +0 in every float
// dtype) at the copy engine's write rate; this kernel, a thread per row, then writes the one
// non-zero of each row: one write of [rows, V] where the pointwise form divided every index.
__global__ void nll_loss_backward_scatter_kernel(const void* g, int dg, const int64_t* labels,
                                                 const void* total_weight, int dtw, void* glp,
                                                 int dglp, int64_t rows, int64_t V,
                                                 int64_t ignore) {
  const float v = __fdiv_rn(-load_f(g, dg, 0), load_f(total_weight, dtw, 0));
  for (int64_t r = global_thread(); r < rows; r += grid_threads()) {
    const int64_t y = labels[r];
    if (y != ignore && y >= 0 && y < V) store_f(glp, dglp, r * V + y, v);
  }
}

// Foreach sums: block b reduces item b in double (a fixed order: deterministic).
constexpr int kMaxItems = 64;
struct Items {
  launch::ReduceItem it[kMaxItems];
};
__global__ void __launch_bounds__(1024) reduce_sums_kernel(Items items, int count, bool squares,
                                                           void* out, int dout, int64_t out_base) {
  __shared__ double scratch[32];
  const launch::ReduceItem it = items.it[blockIdx.x];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < it.n; i += blockDim.x) {
    const float v = load_f(it.p, it.dt, i);
    acc += squares ? static_cast<double>(v) * v : static_cast<double>(v);
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) store_f(out, dout, out_base + blockIdx.x, static_cast<float>(acc));
}

// NOTE [Chunked squared norms]: kSquaredNorm with _foreach_norm's scratch (NOTE [foreach_norm
// scratch], core/optim/adamw.cc) runs as PyTorch's multi_tensor_apply does: stage 1 gives every
// `chunk` elements of every tensor its own block, which writes the chunk's sum of squares
// (double inside the block, stored fp32 as PyTorch's op-math partial) to partials[t * max_chunks
// + c]; stage 2 sums each tensor's partials in double, one block per tensor. Fixed partitions and
// fixed reduction trees: the same inputs give the same bits. One block per tensor (the path
// without scratch) reads a 262M-element embedding gradient from one SM: tens of milliseconds.
struct ChunkBatch {
  launch::ReduceItem it[kMaxItems];
  int64_t
      first[kMaxItems + 1];  // first[t]: the batch's first block of item t; first[count] = blocks
};
constexpr int kChunkThreads = 512, kChunkUnroll = 4;

__device__ int chunk_item(const ChunkBatch& b, int count,
                          int64_t block) {  // largest t: first[t] <= block
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (b.first[mid] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

__global__ void chunk_squares_kernel(ChunkBatch b, int count, int64_t chunk, float* partials,
                                     int64_t max_chunks) {
  __shared__ double scratch[32];
  const int64_t block = blockIdx.x;
  const int t = chunk_item(b, count, block);
  const launch::ReduceItem it = b.it[t];
  const int64_t c = block - b.first[t], begin = c * chunk, end = min(it.n, begin + chunk);
  double acc = 0;
  // 8-element vectors when the tensor's base is 16-byte aligned (chunk starts are multiples of 8:
  // launch::chunked_squared_norms takes chunk % 8 == 0 for this path), the tail element-wise.
  const bool vec = chunk % 8 == 0 && (reinterpret_cast<uintptr_t>(it.p) & 15) == 0;
  const int64_t body = vec ? begin + (end - begin) / 8 * 8 : begin;
  for (int64_t i0 = begin + 8 * static_cast<int64_t>(threadIdx.x); i0 < body;
       i0 += 8 * 2 * kChunkThreads) {
    float v[2][8];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int64_t i = i0 + static_cast<int64_t>(u) * 8 * kChunkThreads;
      if (i < body) {
        load8(it.p, it.dt, i, v[u]);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) v[u][k] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int k = 0; k < 8; ++k) acc += static_cast<double>(v[u][k]) * v[u][k];
  }
  for (int64_t i0 = body + threadIdx.x; i0 < end; i0 += kChunkUnroll * kChunkThreads) {
    float v[kChunkUnroll];  // the loads first: kChunkUnroll in flight per thread
#pragma unroll
    for (int u = 0; u < kChunkUnroll; ++u) {
      const int64_t i = i0 + static_cast<int64_t>(u) * kChunkThreads;
      v[u] = i < end ? load_f(it.p, it.dt, i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kChunkUnroll; ++u) acc += static_cast<double>(v[u]) * v[u];
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0)
    partials[static_cast<int64_t>(t) * max_chunks + c] = static_cast<float>(acc);
}

__global__ void chunk_sum_kernel(ChunkBatch b, const float* partials, int64_t max_chunks, void* out,
                                 int dout, int64_t out_base) {
  __shared__ double scratch[32];
  const int t = blockIdx.x;
  const int64_t chunks = b.first[t + 1] - b.first[t];
  const float* p = partials + static_cast<int64_t>(t) * max_chunks;
  double acc = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) acc += p[c];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) store_f(out, dout, out_base + t, static_cast<float>(acc));
}

unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), plan::kMaxGrid));
}

}  // namespace

namespace launch {

void embedding(const int64_t* ids, const void* w, int dw, void* y, int dy, int64_t n, int64_t V,
               int64_t D, int64_t vocab_start, cudaStream_t s) {
  if (n * D == 0) return;
  const plan::Launch l = plan::launch_1d(n * D);
  embedding_kernel<<<l.grid, l.block, 0, s>>>(ids, w, dw, y, dy, n, V, D, vocab_start);
  check_launch("embedding");
}

void embedding_backward(const void* g, int dg, const int64_t* ids, void* gw, int dgw, int64_t n,
                        int64_t V, int64_t D, int64_t vocab_start, cudaStream_t s) {
  const int64_t es = dgw == kF32 ? 4 : 2;
  if (V * D == 0) return;
  if (cudaMemsetAsync(gw, 0, static_cast<size_t>(V * D * es), s) != cudaSuccess)
    check_launch("embedding_backward zero");
  if (n == 0) return;
  const int64_t smem = plan::embedding_backward_smem(D);
  // The opt-in is needed once dynamic plus static shared memory (match[], 1 KiB) passes 48 KiB.
  if (smem + static_cast<int64_t>(sizeof(int)) * kEmbBlock > 48 * 1024 &&
      cudaFuncSetAttribute(embedding_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem)) != cudaSuccess)
    check_launch("embedding_backward shared-memory opt-in");
  embedding_backward_kernel<<<row_grid(n), kEmbBlock, static_cast<size_t>(smem), s>>>(
      g, dg, ids, gw, dgw, n, V, D, std::max<int64_t>(vocab_start, 0));
  check_launch("embedding_backward");
}

void position_embedding(const void* x, int dx, const void* wpe, int dw, void* y, int dy,
                        int64_t rows, int64_t S, int64_t D, int64_t p0, cudaStream_t s) {
  if (rows * D == 0) return;
  const plan::Launch l = plan::launch_1d(rows * D);
  position_embedding_kernel<<<l.grid, l.block, 0, s>>>(x, dx, wpe, dw, y, dy, rows * D, S, D, p0);
  check_launch("position_embedding");
}

void position_embedding_backward(const void* g, int dg, void* gw, int dgw, int64_t batch, int64_t S,
                                 int64_t P, int64_t D, int64_t p0, cudaStream_t s) {
  if (P * D == 0) return;
  const plan::Launch l = plan::launch_1d(P * D);
  position_embedding_backward_kernel<<<l.grid, l.block, 0, s>>>(g, dg, gw, dgw, batch, S, P, D, p0);
  check_launch("position_embedding_backward");
}

void log_softmax(const void* x, int dx, void* y, int dy, int64_t rows, int64_t V, cudaStream_t s) {
  if (rows == 0) return;
  log_softmax_kernel<<<row_grid(rows), plan::row_block(V), 0, s>>>(x, dx, y, dy, rows, V);
  check_launch("log_softmax");
}

void log_softmax_backward(const void* g, int dg, const void* y, int dy, void* gx, int dgx,
                          int64_t rows, int64_t V, cudaStream_t s) {
  if (rows == 0) return;
  log_softmax_backward_kernel<<<row_grid(rows), plan::row_block(V), 0, s>>>(g, dg, y, dy, gx, dgx,
                                                                            rows, V);
  check_launch("log_softmax_backward");
}

void nll_loss(const void* lp, int dlp, const int64_t* labels, void* loss, void* total_weight,
              int dloss, int64_t rows, int64_t V, int64_t ignore, cudaStream_t s) {
  nll_loss_kernel<<<1, 1024, 0, s>>>(lp, dlp, labels, loss, total_weight, dloss, rows, V, ignore);
  check_launch("nll_loss");
}

void nll_loss_backward(const void* g, int dg, const int64_t* labels, const void* total_weight,
                       int dtw, void* glp, int dglp, int64_t rows, int64_t V, int64_t ignore,
                       cudaStream_t s) {
  if (rows * V == 0) return;
  const int64_t es = dglp == kF32 ? 4 : 2;
  if (cudaMemsetAsync(glp, 0, static_cast<size_t>(rows * V * es), s) != cudaSuccess)
    check_launch("nll_loss_backward zero");
  const plan::Launch l = plan::launch_1d(rows);
  nll_loss_backward_scatter_kernel<<<l.grid, l.block, 0, s>>>(g, dg, labels, total_weight, dtw, glp,
                                                              dglp, rows, V, ignore);
  check_launch("nll_loss_backward");
}

void reduce_sums(const ReduceItem* items, int count, bool squares, void* out, int dout,
                 cudaStream_t s) {
  for (int first = 0; first < count; first += kMaxItems) {
    const int m = std::min(kMaxItems, count - first);
    Items batch{};
    for (int i = 0; i < m; ++i) batch.it[i] = items[first + i];
    reduce_sums_kernel<<<static_cast<unsigned>(m), 1024, 0, s>>>(batch, m, squares, out, dout,
                                                                 first);
    check_launch("reduce_sums");
  }
}

void chunked_squared_norms(const ReduceItem* items, int count, int64_t chunk, float* partials,
                           int64_t max_chunks, void* out, int dout, cudaStream_t s) {
  for (int first = 0; first < count; first += kMaxItems) {
    const int m = std::min(kMaxItems, count - first);
    ChunkBatch b{};
    b.first[0] = 0;
    for (int i = 0; i < m; ++i) {
      b.it[i] = items[first + i];
      b.first[i + 1] = b.first[i] + (b.it[i].n + chunk - 1) / chunk;
    }
    float* batch_partials = partials + static_cast<int64_t>(first) * max_chunks;
    if (b.first[m] > 0) {
      chunk_squares_kernel<<<static_cast<unsigned>(b.first[m]), kChunkThreads, 0, s>>>(
          b, m, chunk, batch_partials, max_chunks);
      check_launch("squared norms (chunks)");
    }
    chunk_sum_kernel<<<static_cast<unsigned>(m), 256, 0, s>>>(b, batch_partials, max_chunks, out,
                                                              dout, first);
    check_launch("squared norms (per tensor)");
  }
}

}  // namespace launch
}  // namespace fullshard::cuda
