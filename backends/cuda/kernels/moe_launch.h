#pragma once
// The mixture-of-experts kernels (moe_router.cu, moe_reorder.cu, moe_grouped_mm.cu; NOTE [MoE
// kernels on the GPU] in moe_plan.h), called by moe_dispatch.cc. Plain C++: pointers are device
// addresses, dtypes DCode values (index_math.h), and every launcher only enqueues on `s`.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace fullshard::cuda::launch {

// ---- moe_router.cu: [N, E] scores, [N, K] choices, [N, K, D] expert outputs
void moe_softmax(const void* x, int dx, void* y, int dy, int64_t N, int64_t E, cudaStream_t s);
void moe_softmax_backward(const void* g, int dg, const void* y, int dy, void* o, int dout,
                          int64_t N, int64_t E, cudaStream_t s);
void moe_sigmoid(const void* x, int dx, void* y, int dy, int64_t n, cudaStream_t s);
void moe_sigmoid_backward(const void* g, int dg, const void* y, int dy, void* o, int dout,
                          int64_t n, cudaStream_t s);
void moe_topk(const void* x, int dx, void* vals, int dv, int64_t* idx, int64_t N, int64_t E,
              int64_t K, cudaStream_t s);
void moe_topk_backward(const void* g, int dg, const int64_t* idx, void* o, int dout, int64_t N,
                       int64_t E, int64_t K, cudaStream_t s);
void moe_route_norm(const void* x, int dx, void* y, int dy, void* den, int dden, int64_t N,
                    int64_t K, cudaStream_t s);
void moe_route_norm_backward(const void* g, int dg, const void* x, int dx, const void* den,
                             int dden, void* o, int dout, int64_t N, int64_t K, cudaStream_t s);
void moe_histogram(const int64_t* idx, int64_t n, void* counts, int dc, int64_t E, cudaStream_t s);
// y = idx with each expert's slots past `cap` set to E, fp32 scores (NOTE [Capacity factor] in
// core/model/moe_routing.h).
void moe_expert_capacity(const float* score, const int64_t* idx, int64_t* y, int64_t n, int64_t E,
                         int64_t cap, int policy, cudaStream_t s);
void moe_weighted_sum(const void* w, int dw, const void* y, int dy, void* o, int dout, int64_t N,
                      int64_t K, int64_t D, cudaStream_t s);
void moe_weighted_sum_backward(const void* g, int dg, const void* w, int dw, const void* y, int dy,
                               void* gw, int dgw, void* gy, int dgy, int64_t N, int64_t K,
                               int64_t D, cudaStream_t s);

// ---- moe_reorder.cu: int64 indices, rows of `row_bytes` moved `unit` bytes at a time
void moe_argsort(const int64_t* x, int64_t* y, int64_t n, cudaStream_t s);
void moe_floor_divide(const int64_t* x, int64_t* y, int64_t n, int64_t d, cudaStream_t s);
void moe_gather_rows(const void* x, const int64_t* index, void* y, int64_t m, int64_t rows,
                     int64_t row_bytes, int unit, cudaStream_t s);
// `slots`: NOTE [Scatter rows without scratch] (moe_reorder.cu); else one block in index order.
void moe_scatter_rows(const void* src, const int64_t* index, void* y, int64_t m, int64_t rows,
                      int64_t row_bytes, int unit, bool slots, cudaStream_t s);
void moe_index_add_rows(const void* g, int dg, const int64_t* index, void* y, int dy, int64_t m,
                        int64_t rows, int64_t width, cudaStream_t s);
// x [rows] then zero rows up to out_rows (>= rows), rows of row_bytes.
void moe_pad_row(const void* x, void* y, int64_t rows, int64_t out_rows, int64_t row_bytes,
                 int unit, cudaStream_t s);
void moe_permute_indices(const void* counts, int dc, int64_t n_counts, int64_t E, int64_t align,
                         int64_t P, int64_t* perm, int64_t* offs, size_t smem, cudaStream_t s);

// ---- moe_grouped_mm.cu (NOTE [Grouped GEMM tiles] in moe_index.h)
enum class GroupedMm : int { kForward, kBackwardInput, kBackwardWeight };
// kForward: y [rows, n] = x [rows, k] . w[e]^T; kBackwardInput: y [rows, k] = g [rows, n] . w[e];
// kBackwardWeight: y [E, n, k] = g[group]^T . x[group].
void moe_grouped_mm(GroupedMm which, const void* a, int da, const void* b, int db,
                    const int64_t* offs, void* y, int dy, int64_t rows, int64_t k, int64_t n,
                    int64_t E, cudaStream_t s);

}  // namespace fullshard::cuda::launch
