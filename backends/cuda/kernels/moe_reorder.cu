// The mixture-of-experts token reordering kernels on the GPU (NOTE [MoE kernels on the GPU] in
// moe_plan.h): stable argsort, floor division, row gather / scatter / index-add, the zero row and
// torchtitan's generate_permute_indices, as backends/cpu/kernels/moe_reorder.cc computes them.
// Every kernel but index-add writes the CPU's bits; index-add adds with atomics (its order, and so
// its last bits, vary from run to run).
#include <cstdint>

#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/moe_index.h"
#include "backends/cuda/kernels/moe_launch.h"

namespace fullshard::cuda::launch {

namespace {

using dev::load_f;

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

#define FS_GRID_STRIDE(i, n) \
  for (int64_t i = dev::global_thread(); i < (n); i += dev::grid_threads())

// A thread per element counts, over tiles of every key staged in shared memory, the keys below
// its own and the equal keys before it: its position in the stable order. O(n^2) comparisons
// (no scratch: NOTE [No kernel allocations]); fine at a rank's N * K routed rows.
__global__ void argsort_kernel(const int64_t* x, int64_t* y, int64_t n) {
  __shared__ int64_t tile[kThreads];
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads; base < n;
       base += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t i = base + threadIdx.x;
    const int64_t key = i < n ? x[i] : 0;
    int64_t less = 0, equal_before = 0;
    for (int64_t t = 0; t < n; t += kThreads) {
      __syncthreads();
      if (t + threadIdx.x < n) tile[threadIdx.x] = x[t + threadIdx.x];
      __syncthreads();
      const int64_t m = n - t < kThreads ? n - t : kThreads;
      for (int64_t j = 0; j < m; ++j) {
        const int64_t v = tile[j];
        less += v < key;
        equal_before += (v == key) & (t + j < i);
      }
    }
    if (i < n) y[moe_argsort_position(less, equal_before)] = i;
  }
}

__global__ void floor_divide_kernel(const int64_t* x, int64_t* y, int64_t n, int64_t d) {
  FS_GRID_STRIDE(i, n) y[i] = moe_floor_div(x[i], d);
}

template <class U>
__global__ void gather_rows_kernel(const U* x, const int64_t* index, U* y, int64_t m, int64_t rows,
                                   int64_t units) {
  FS_GRID_STRIDE(i, m * units) {
    const int64_t e = i / units, u = i - e * units;
    const int64_t r = moe_row_of(index[e], rows);
    if (r >= 0) y[i] = x[r * units + u];
  }
}

template <class U>
__global__ void zero_kernel(U* y, int64_t units) {
  FS_GRID_STRIDE(i, units) y[i] = U{};
}

// NOTE [Scatter rows without scratch]: out = zeros, out[index[i]] = src[i], a later i winning
// where indices repeat (torchtitan's -1 padding entries all name the dropped pad row). The
// output is its own scratch: after zeroing, each i max-es i + 1 into the first 4 bytes of its
// row (atomicMax: the largest i wins, whatever the order), then a block per output row reads
// its winner before any thread writes the row, and copies that source row (or leaves the zeros:
// slot 0 is no writer). Needs rows of a multiple of 4 bytes on a 4-byte aligned base (the plan
// checks); other rows go through one block in index order.
__global__ void scatter_claim_kernel(const int64_t* index, char* y, int64_t m, int64_t rows,
                                     int64_t row_bytes) {
  FS_GRID_STRIDE(i, m) {
    const int64_t r = moe_row_of(index[i], rows);
    if (r >= 0) atomicMax(reinterpret_cast<int*>(y + r * row_bytes), static_cast<int>(i + 1));
  }
}

template <class U>
__global__ void scatter_copy_kernel(const U* src, U* y, int64_t rows, int64_t row_bytes,
                                    int64_t units) {
  __shared__ int winner;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    __syncthreads();
    if (threadIdx.x == 0)
      winner = *reinterpret_cast<const int*>(reinterpret_cast<const char*>(y) + r * row_bytes);
    __syncthreads();
    if (winner == 0) continue;
    const int64_t i = winner - 1;
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x) y[r * units + u] = src[i * units + u];
  }
}

template <class U>
__global__ void scatter_in_order_kernel(const U* src, const int64_t* index, U* y, int64_t m,
                                        int64_t rows, int64_t units) {
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = moe_row_of(index[i], rows);
    if (r >= 0)
      for (int64_t u = threadIdx.x; u < units; u += blockDim.x) y[r * units + u] = src[i * units + u];
    __syncthreads();
  }
}

template <class T>
__global__ void index_add_kernel(const void* g, int dg, const int64_t* index, T* y, int64_t m,
                                 int64_t rows, int64_t width) {
  FS_GRID_STRIDE(i, m * width) {
    const int64_t e = i / width, w = i - e * width;
    const int64_t r = moe_row_of(index[e], rows);
    if (r >= 0) atomicAdd(y + r * width + w, static_cast<T>(load_f(g, dg, i)));
  }
}

template <class U>
__global__ void pad_row_kernel(const U* x, U* y, int64_t units_in, int64_t units_out) {
  FS_GRID_STRIDE(i, units_out) y[i] = i < units_in ? x[i] : U{};
}

// Every block stages the counts, their exclusive starts and the groups' ends in shared memory
// (thread 0 sums them in order: n_counts is ep x E), then fills its share of the permutation.
__global__ void permute_indices_kernel(const void* counts, int dc, int64_t n_counts, int64_t E,
                                       int64_t align, int64_t P, int64_t* perm, int64_t* offs) {
  extern __shared__ int64_t sh[];
  int64_t* c = sh;
  int64_t* start = sh + n_counts;
  int64_t* ends = sh + 2 * n_counts;
  for (int64_t i = threadIdx.x; i < n_counts; i += blockDim.x) {
    const float v = load_f(counts, dc, i);
    c[i] = v > 0.0f ? static_cast<int64_t>(v) : 0;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int64_t ranks = n_counts / E;
    int64_t total = 0, end = 0;
    for (int64_t i = 0; i < n_counts; ++i) start[i] = total, total += c[i];
    for (int64_t e = 0; e < E; ++e) {
      int64_t sum = 0;
      for (int64_t r = 0; r < ranks; ++r) sum += c[r * E + e];
      end = moe_group_end(end, sum, align);
      ends[e] = end;
    }
  }
  __syncthreads();
  if (blockIdx.x == 0)
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) offs[e] = ends[e];
  FS_GRID_STRIDE(p, P) perm[p] = moe_permute_entry(p, c, start, ends, E, n_counts / E);
}

template <class F>
void by_unit(int unit, F&& f) {
  switch (unit) {
    case 16: return f(uint4{});
    case 8: return f(uint2{});
    case 4: return f(uint32_t{});
    case 2: return f(uint16_t{});
    default: return f(uint8_t{});
  }
}

}  // namespace

void moe_argsort(const int64_t* x, int64_t* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  argsort_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  check_launch("moe_argsort");
}

void moe_floor_divide(const int64_t* x, int64_t* y, int64_t n, int64_t d, cudaStream_t s) {
  if (n == 0) return;
  floor_divide_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, y, n, d);
  check_launch("moe_floor_divide");
}

void moe_gather_rows(const void* x, const int64_t* index, void* y, int64_t m, int64_t rows,
                     int64_t row_bytes, int unit, cudaStream_t s) {
  if (m == 0) return;
  by_unit(unit, [&](auto u) {
    using U = decltype(u);
    const int64_t units = row_bytes / static_cast<int64_t>(sizeof(U));
    gather_rows_kernel<U><<<blocks_for(m * units), kThreads, 0, s>>>(
        static_cast<const U*>(x), index, static_cast<U*>(y), m, rows, units);
  });
  check_launch("moe_gather_rows");
}

void moe_scatter_rows(const void* src, const int64_t* index, void* y, int64_t m, int64_t rows,
                      int64_t row_bytes, int unit, bool slots, cudaStream_t s) {
  if (rows == 0) return;
  by_unit(unit, [&](auto u) {
    using U = decltype(u);
    const int64_t units = row_bytes / static_cast<int64_t>(sizeof(U));
    zero_kernel<U><<<blocks_for(rows * units), kThreads, 0, s>>>(static_cast<U*>(y), rows * units);
    check_launch("moe_scatter_rows (zeros)");
    if (m == 0) return;
    if (!slots) {
      scatter_in_order_kernel<U><<<1, kThreads, 0, s>>>(static_cast<const U*>(src), index,
                                                        static_cast<U*>(y), m, rows, units);
      return;
    }
    scatter_claim_kernel<<<blocks_for(m), kThreads, 0, s>>>(index, static_cast<char*>(y), m, rows,
                                                            row_bytes);
    check_launch("moe_scatter_rows (claims)");
    const unsigned grid = static_cast<unsigned>(rows < 65535 ? rows : 65535);
    scatter_copy_kernel<U><<<grid, kThreads, 0, s>>>(static_cast<const U*>(src),
                                                     static_cast<U*>(y), rows, row_bytes, units);
  });
  check_launch("moe_scatter_rows");
}

void moe_index_add_rows(const void* g, int dg, const int64_t* index, void* y, int dy, int64_t m,
                        int64_t rows, int64_t width, cudaStream_t s) {
  const int64_t n = rows * width;
  if (n == 0) return;
  const int64_t zero_units = n * (dy == kF32 ? 4 : 2) / 2;  // 16-bit units
  zero_kernel<uint16_t><<<blocks_for(zero_units), kThreads, 0, s>>>(static_cast<uint16_t*>(y),
                                                                    zero_units);
  check_launch("moe_index_add_rows (zeros)");
  if (m == 0) return;
  const unsigned grid = blocks_for(m * width);
  if (dy == kBF16) {
    index_add_kernel<__nv_bfloat16><<<grid, kThreads, 0, s>>>(
        g, dg, index, static_cast<__nv_bfloat16*>(y), m, rows, width);
  } else if (dy == kF16) {
    index_add_kernel<__half><<<grid, kThreads, 0, s>>>(g, dg, index, static_cast<__half*>(y), m,
                                                       rows, width);
  } else {
    index_add_kernel<float><<<grid, kThreads, 0, s>>>(g, dg, index, static_cast<float*>(y), m,
                                                      rows, width);
  }
  check_launch("moe_index_add_rows");
}

void moe_pad_row(const void* x, void* y, int64_t rows, int64_t out_rows, int64_t row_bytes,
                 int unit, cudaStream_t s) {
  by_unit(unit, [&](auto u) {
    using U = decltype(u);
    const int64_t units = row_bytes / static_cast<int64_t>(sizeof(U));
    pad_row_kernel<U><<<blocks_for(out_rows * units), kThreads, 0, s>>>(
        static_cast<const U*>(x), static_cast<U*>(y), rows * units, out_rows * units);
  });
  check_launch("moe_pad_row");
}

void moe_permute_indices(const void* counts, int dc, int64_t n_counts, int64_t E, int64_t align,
                         int64_t P, int64_t* perm, int64_t* offs, size_t smem, cudaStream_t s) {
  permute_indices_kernel<<<blocks_for(P), kThreads, smem, s>>>(counts, dc, n_counts, E, align, P,
                                                               perm, offs);
  check_launch("moe_permute_indices");
}

}  // namespace fullshard::cuda::launch
