#pragma once
// Device helpers shared by the tensor-core flash forward (attention_tc.cu) and backward
// (attention_tc_bwd.cu): tile sizes, rounding into the storage dtype, and 16-byte staging of
// token rows into shared memory. WMMA operands are bf16 / fp16 (T), accumulators fp32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fullshard::cuda::tc {

constexpr int kBQ = 64, kBK = 64;  // query rows / key rows per tile
constexpr int kWarps = 4;          // 16 rows of the block's 64 per warp

template <class T>
__device__ __forceinline__ T to_t(float f);
template <>
__device__ __forceinline__ __nv_bfloat16 to_t<__nv_bfloat16>(float f) {
  return __float2bfloat16_rn(f);
}
template <>
__device__ __forceinline__ __half to_t<__half>(float f) {
  return __float2half_rn(f);
}

// rows x HD elements of T from src (row t at element idx(t), or zeros when idx < 0) to dst with
// row stride ld, 16 bytes per access: every source row start must be 16-byte aligned (HD and the
// row strides are multiples of 8 elements and the dispatcher checks the base addresses).
template <class T, int HD, class Idx>
__device__ __forceinline__ void stage_rows(T* dst, int ld, const T* src, int rows, Idx idx) {
  constexpr int kVecPerRow = HD / 8;
  for (int e = threadIdx.x; e < rows * kVecPerRow; e += blockDim.x) {
    const int t = e / kVecPerRow, c = (e - t * kVecPerRow) * 8;
    const int64_t at = idx(t);
    const uint4 val =
        at >= 0 ? *reinterpret_cast<const uint4*>(src + at + c) : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(dst + t * ld + c) = val;
  }
}

}  // namespace fullshard::cuda::tc
