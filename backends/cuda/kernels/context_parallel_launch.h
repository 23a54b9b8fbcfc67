#pragma once
// Context parallelism's kernels (context_parallel.cu; NOTE [Ring attention on the CUDA backend]
// in context_parallel_plan.h), called by context_parallel_dispatch.cc. Plain C++: pointers are
// device addresses, dtypes DCode values (index_math.h), and every launcher only enqueues on `s`.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "backends/cuda/kernels/context_parallel_plan.h"

namespace fullshard::cuda::launch {

// A ring round's forward: o (dtype `dout`, contiguous) and lse (fp32) from q, k, v (dtype `dt`).
void ring_attention_forward(const RingAttnLayout& l, const void* q, const void* k, const void* v,
                            int dt, void* o, int dout, float* lse, cudaStream_t s);
// Its backward: dq, dk, dv (contiguous) from dO (dtype `ddo`), q, k, v (`dt`), O (`dto`) and lse;
// softmax_d receives each query row's delta = rowsum(dO O).
struct RingGrads {
  void *dq, *dk, *dv;
  int ddq, ddk, ddv;
  float* softmax_d;
};
void ring_attention_backward(const RingAttnLayout& l, const void* dout, int ddo, const void* q,
                             const void* k, const void* v, int dt, const void* o, int dto,
                             const float* lse, const RingGrads& g, cudaStream_t s);
// kSdpaMerge: out' / lse' = out / lse, with the block's rows merged (fp32).
void sdpa_merge(const SdpaMergePlan& p, const float* out, const float* lse, const void* block,
                const float* block_lse, float* out2, float* lse2, cudaStream_t s);
// kSeqRowsAdd: dst rows [begin, begin + n) of each batch += src, fp32 math in dst's dtype.
void seq_rows_add(const plan::SeqRowsPlan& p, void* dst, const void* src, cudaStream_t s);

}  // namespace fullshard::cuda::launch
