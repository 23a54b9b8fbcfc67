#pragma once
// Warp-level primitives of the FlashAttention-2 kernels (sm_80+): cp.async 16-byte copies with
// zero fill, ldmatrix (plain and .trans), mma.sync m16n8k16 with fp32 accumulators, and the
// fragment index maps they imply.
//
// NOTE [mma.sync fragments]: with g = lane / 4 and t = lane % 4, an m16n8k16 accumulator holds
// c[0..1] at (row g, columns 2t, 2t+1) and c[2..3] at (row g + 8, same columns); an A fragment
// (16 x 16, row-major) holds a[0] (row g, k 2t..2t+1), a[1] (row g + 8), a[2] (row g, k 8+2t..),
// a[3] (row g + 8, k 8+2t..); a B fragment (16 x 8) holds b[0] (k 2t..2t+1, column g) and b[1]
// (k 8+2t..). So two adjacent accumulator tiles of n8 (columns 16 kk .. 16 kk + 15), rounded to
// 16 bits in pairs, are exactly the A fragment of k block kk: P and dS go from one product into
// the next without shared memory. ldmatrix.x4 reads four 8 x 8 matrices whose row addresses
// come from lanes 8m .. 8m + 7 (matrix m) and gives lane (g, t) elements (g, 2t..2t+1) of each;
// .trans gives (2t..2t+1, g), i.e. the B fragment of a row-major [k][n] tile.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/attention_fa2_plan.h"
#include "backends/cuda/kernels/index_math.h"

namespace fullshard::cuda::fa2 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; valid == false writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a b (16 x 8 x 16), T = __nv_bfloat16 or __half.
template <class T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, "
      "%9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded (nearest even) to T, lo in the low half.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The A fragment of k block kk from accumulator tiles c[2 kk], c[2 kk + 1] (NOTE [mma.sync
// fragments]).
template <class T>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4],
                                         const float (&c1)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}

// The ldmatrix lane maps (a_row, b_row, bt_row, at_row, ...) are in attention_fa2_plan.h, where
// the host tests emulate them.

// rows x HD elements from global (row t at src + idx(t), skipped (zeros) when idx(t) < 0) into
// shared with row stride ld, 16 bytes per cp.async, all threads of the block.
template <int HD, class T, class Idx>
__device__ __forceinline__ void async_rows(T* dst, int ld, const T* src, int rows, Idx idx) {
  constexpr int kVec = HD / 8;
  for (int e = threadIdx.x; e < rows * kVec; e += blockDim.x) {
    const int t = e / kVec, c = (e - t * kVec) * 8;
    const int64_t at = idx(t);
    cp_async16(dst + t * ld + c, at >= 0 ? src + at + c : src, at >= 0);
  }
}

// The kernels' dtype code of a 16-bit storage type (index_math.h).
template <class T>
constexpr int dcode_of() {
  return std::is_same_v<T, __nv_bfloat16> ? kBF16 : kF16;
}

}  // namespace fullshard::cuda::fa2
