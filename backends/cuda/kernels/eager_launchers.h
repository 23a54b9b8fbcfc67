#pragma once
// The eager decompositions' entry points (model.implementation; docs/ops.md "Implementation
// variants"): launch_eager (eager_dispatch.cc) checks an op as the CPU kernel does
// (backends/cpu/kernels/eager.cc, rope.cc), then calls one launcher of eager.cu. Plain C++;
// pointers are device addresses, dtypes are DCode values, and every launcher only enqueues.
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "backends/cuda/kernels/eager_index.h"
#include "core/runtime/op.h"

namespace fullshard::cuda {

// kPowScalar, kAddScalar, kRsqrt, kMulBroadcast, kSumLeadingDims, kExpandLastDim,
// kRepeatKV(Backward), kRotaryCosSin, kRotateHalfCat; throws InternalError (naming the op) on a
// bad layout, before anything is enqueued. (kSumLastDim and kNarrowCopy, which tensor
// parallelism's losses issue too, are tensor_parallel.h's; kRoPEComplex runs dispatch.cc's RoPE
// with adjacent pairs.)
void launch_eager(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out,
                  cudaStream_t s);

namespace launch {

// o = f(a) over n elements; in place (o == a) is fine. The exponents 1, 2, 3 are the CPU's
// exact special cases; kPow is any other (fp32 pow, as std::pow(float, float)).
enum class Scalar : int { kPow1, kPow2, kPow3, kPow, kAdd, kRsqrt };
void scalar_op(Scalar op, const void* a, int da, void* o, int dout, int64_t n, float f,
               cudaStream_t s);

// o [rows, D] = a [rows, D] * b[bcast_index(mode, r, d, hd)]; in place (o == a) is fine.
void mul_broadcast(Bcast mode, const void* a, int da, const void* b, int db, void* o, int dout,
                   int64_t rows, int64_t D, int64_t hd, cudaStream_t s);
// y[r, d] = x[r] * scale.
void expand_last_dim(const void* x, int dx, void* y, int dy, int64_t rows, int64_t D, float scale,
                     cudaStream_t s);

// The inverse frequencies of a head's pairs as the CPU computes them (rope_inv_freq,
// core/runtime/rope_args.h), passed by value: no device memory (NOTE [No kernel allocations]).
constexpr int64_t kMaxEagerRopePairs = 512;  // head_dim <= 1024
struct RopeFreqs {
  float inv[kMaxEagerRopePairs];
};
// kRotaryCosSin: cos, sin [rows, hd], position row % S, element i at frequency i % (hd / 2).
void rotary_cos_sin(void* cos_t, int dcos, void* sin_t, int dsin, int64_t rows, int64_t S,
                    int64_t hd, const RopeFreqs& f, cudaStream_t s);

// x [rows, kv * hd] -> y [rows, kv * rep * hd] (a bit copy when the dtypes match), and the
// backward's sum over the rep copies in fp32, in copy order.
void repeat_kv(const void* x, int dx, void* y, int dy, int64_t rows, int64_t kv, int64_t rep,
               int64_t hd, cudaStream_t s);
void repeat_kv_backward(const void* g, int dg, void* gx, int dgx, int64_t rows, int64_t kv,
                        int64_t rep, int64_t hd, cudaStream_t s);
// y [blocks, hd] = cat(neg [blocks, hd/2], x[.., :hd/2]) per block (bit copies when dtypes match).
void rotate_half_cat(const void* neg, int dn, const void* x, int dx, void* y, int dy,
                     int64_t blocks, int64_t hd, cudaStream_t s);

}  // namespace launch
}  // namespace fullshard::cuda
