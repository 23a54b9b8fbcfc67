#pragma once
// Index maps shared by the host planners (plan.cc, unit-tested without a GPU) and the device
// kernels: one definition of every address computation, so the host tests check the math the
// kernels run. Plain C++ when not compiled by nvcc.
#include <cstdint>

#if defined(__CUDACC__)
#define FS_HD __host__ __device__ __forceinline__
#else
#define FS_HD inline
#endif

namespace fullshard::cuda {

// Storage dtype codes: the values of fullshard::DType (core/tensor/dtype.h), which the device
// code cannot include. plan.cc static_asserts that they match.
enum DCode : int { kF32 = 0, kBF16 = 1, kF16 = 2, kU8 = 3, kI64 = 4 };

// NOTE [Strided 2-D copy]: every copy-shaped op (cast copies, foreach copies, torch.cat along
// the last dim, all-gather copy-in / copy-out, chunk-cat) is a list of these: element (r, c)
// of a rows x cols block goes from src[src_off + r*src_ld + c] to dst[dst_off + r*dst_ld + c],
// and a source index at or past src_limit reads as zero (chunk-cat's padding rows).
struct Copy2D {
  int64_t rows = 1, cols = 0;
  int64_t src_off = 0, src_ld = 0, src_limit = 0;
  int64_t dst_off = 0, dst_ld = 0;
};

FS_HD int64_t copy2d_numel(const Copy2D& c) { return c.rows * c.cols; }
// Source and destination element index of the e-th element (row-major over rows x cols).
FS_HD void copy2d_index(const Copy2D& c, int64_t e, int64_t& src, int64_t& dst) {
  const int64_t r = e / c.cols, col = e - r * c.cols;
  src = c.src_off + r * c.src_ld + col;
  dst = c.dst_off + r * c.dst_ld + col;
}

// RoPE (rotate_half): token row `row` of x [rows, width] has position row % S; pair (i, i+hd/2)
// of head h sits at columns h*hd + i and h*hd + i + hd/2.
FS_HD int64_t rope_first(int64_t row, int64_t width, int64_t hd, int64_t h, int64_t i) {
  return row * width + h * hd + i;
}
// The two elements pair i of head h rotates together: (i, i + hd/2) as above, or with adjacent
// pairs (kRoPEComplex; kCompiledRoPE with CompiledRopeArgs::adjacent) columns h*hd + 2i and
// h*hd + 2i + 1.
FS_HD void rope_pair(int64_t row, int64_t width, int64_t hd, int64_t h, int64_t i, bool adjacent,
                     int64_t& i1, int64_t& i2) {
  i1 = adjacent ? row * width + h * hd + 2 * i : rope_first(row, width, hd, h, i);
  i2 = i1 + (adjacent ? 1 : hd / 2);
}

// Attention layouts (docs/kernels.md): q / k / v token rows have strides q_ld / kv_ld and column
// offsets; O, dO, dq are [B, S, H, hd]; lse and softmax_d are [B, H, S] with rows lse_ld and
// softmax_d_ld long: flash's lse rows are S long and its softmax_d rows round128(S); efficient
// attention pads lse rows to round32(S) (the padding is never read or written).
struct AttnLayout {
  int64_t B, S, H, Hkv, hd;
  int64_t q_ld, kv_ld, q_off, k_off, v_off;  // elements
  int64_t group;                             // H / Hkv
  float scale;                               // 1 / sqrt(hd)
  int64_t lse_ld;                            // logsumexp row length (>= S)
};
FS_HD int64_t attn_q_index(const AttnLayout& a, int64_t b, int64_t s, int64_t h) {
  return (b * a.S + s) * a.q_ld + a.q_off + h * a.hd;
}
FS_HD int64_t attn_k_index(const AttnLayout& a, int64_t b, int64_t s, int64_t kvh) {
  return (b * a.S + s) * a.kv_ld + a.k_off + kvh * a.hd;
}
FS_HD int64_t attn_v_index(const AttnLayout& a, int64_t b, int64_t s, int64_t kvh) {
  return (b * a.S + s) * a.kv_ld + a.v_off + kvh * a.hd;
}
FS_HD int64_t attn_o_index(const AttnLayout& a, int64_t b, int64_t s, int64_t h) {
  return ((b * a.S + s) * a.H + h) * a.hd;
}
FS_HD int64_t attn_lse_index(const AttnLayout& a, int64_t b, int64_t h, int64_t s) {
  return (b * a.H + h) * a.lse_ld + s;
}

// The scale element of element e of the [rows, cols] operand: 0 tensorwise, e's row (axis -1)
// or its column (axis 0). The CPU's scale_index (float8.cc) in flat
// form; float8_plan.h.
FS_HD int64_t float8_scale_index(int64_t granularity, int64_t axis, int64_t cols, int64_t e) {
  if (granularity == 0) return 0;
  return axis == 0 ? e % cols : e / cols;
}

}  // namespace fullshard::cuda
