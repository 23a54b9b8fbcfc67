#pragma once
// The device entry points of torch.compile's fused regions of a Llama block (compiled.cu;
// core/model/compiled_block.h, reference kernels backends/cpu/kernels/compiled.cc), called by
// dispatch.cc after it has decoded and checked the op. Plain C++, as launchers.h: pointers are
// device addresses, dtypes DCode values, every function only enqueues and allocates nothing.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace fullshard::cuda::launch {

// y = RMSNorm(h) * w with h = x (a null: kCompiledRMSNorm) or x + a in fp32, never stored
// (kCompiledAddRMSNorm); rstd [rows] fp32.
void compiled_rms_norm(const void* x, int dx, const void* a, int da, const void* w, int dw, void* y,
                       int dy, float* rstd, int64_t rows, int64_t D, double eps, cudaStream_t s);

// kCompiledRMSNormBackward: gx = the norm's input gradient at h = x (+ a) (+ gh), gw = its weight
// gradient; a and gh may be null. gx may alias g, x, a or gh.
struct CompiledNormBackward {
  const void *g, *x, *a, *w, *gh;
  int dg, dx, da, dw, dgh;
  const float* rstd;
  void *gx, *gw;
  int dgx, dgw;
};
void compiled_rms_norm_backward(const CompiledNormBackward& b, int64_t rows, int64_t D,
                                cudaStream_t s);

// kCompiledRoPE / kCompiledRoPEBackward: up to two tensors [..., S, width] rotated in one launch
// (y may be x: in place), pairs rotate_half or adjacent, angle = position * inv_freq[i] in fp32.
// inv_freq: the host's rope_inv_freq table (hd / 2 values, at most kMaxRopePairs), passed by
// value as a kernel argument. sign -1: the inverse rotation.
constexpr int64_t kMaxRopePairs = 256;  // head_dim up to 512
struct RopeTensor {
  const void* x;
  void* y;
  int dx, dy;
  int64_t rows, S, width;
};
void compiled_rope(const RopeTensor* t, int count, int64_t hd, bool adjacent, float sign,
                   const float* inv_freq, cudaStream_t s);

// kCompiledSiluMul: y = silu(a) * b. kCompiledSiluMulBackward: ga = g b silu'(a), gb = g a
// sigmoid(a). kCompiledResidualAdd: y = (x + a) + f (y may be f). n elements each; an output may
// alias an input at the same address.
void compiled_silu_mul(const void* a, int da, const void* b, int db, void* y, int dy, int64_t n,
                       cudaStream_t s);
void compiled_silu_mul_backward(const void* g, int dg, const void* a, int da, const void* b, int db,
                                void* ga, int dga, void* gb, int dgb, int64_t n, cudaStream_t s);
void compiled_residual_add(const void* x, int dx, const void* a, int da, const void* f, int df,
                           void* y, int dy, int64_t n, cudaStream_t s);

}  // namespace fullshard::cuda::launch
