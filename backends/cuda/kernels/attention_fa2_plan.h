#pragma once
// Launch plan of the FlashAttention-2 kernels (attention_fa2_fwd.cu, attention_fa2_bwd.cu):
// tile sizes, shared memory bytes, grids and the tile orders, as plain functions that the
// kernels and the host tests (tests/gpu/cuda_kernels_plan_test.cc) both use.
//
// NOTE [FlashAttention-2 tiles]: Forward: 4 warps, a query tile of BM rows (128 at
// head_dim 64, else 64: above 64 the fp32 output rows fill the registers), each warp owning
// BM / 4 rows (two or one m16 MMA tiles), walking key tiles of 64 in shared memory, double
// buffered. Backward: a key tile of 16 rows per warp (8 warps up to head_dim 96, 4 at 128)
// walking query tiles of BM (64 at head_dim <= 64, 32 above: dK and dV of 16 x hd stay in
// registers). Rows are padded by 8
// elements (16 bytes) so that the 8 row addresses of an ldmatrix fall in 8 distinct bank groups.
#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels/index_math.h"

namespace fullshard::cuda::fa2 {

constexpr int kWarps = 4, kThreads = kWarps * 32;  // forward block
constexpr int kKeyTile = 64;                       // forward key tile (BN)

// head_dim the kernels are built for: a multiple of 16 (the MMA's k) up to 128.
FS_HD constexpr bool supports_head_dim(int64_t hd) {
  return hd == 32 || hd == 64 || hd == 80 || hd == 96 || hd == 128;
}

// 128 rows (two m16 tiles per warp) at head_dim 64; 64 elsewhere (at 32 the 128-row tile
// spills on sm_80, above 64 the O fragments fill the registers).
FS_HD constexpr int fwd_query_tile(int64_t hd) { return hd == 64 ? 128 : 64; }
FS_HD constexpr int bwd_query_tile(int64_t hd) { return hd <= 64 ? 64 : 32; }
// Backward block: 16 keys per warp, 8 warps (a key tile of 128, as FlashAttention-2: half the
// dq atomics and Q / dO copies of 64) up to head_dim 96; 4 warps (64 keys) at 128, where 128
// keys would take 115 KB of shared memory, more than sm_86 / sm_89 grant (99 KB).
FS_HD constexpr int bwd_warps(int64_t hd) { return hd <= 96 ? 8 : 4; }
FS_HD constexpr int bwd_threads(int64_t hd) { return 32 * bwd_warps(hd); }
FS_HD constexpr int bwd_key_tile(int64_t hd) { return 16 * bwd_warps(hd); }
FS_HD constexpr int row_stride(int64_t hd) { return static_cast<int>(hd) + 8; }  // elements
// dQ = dS K is computed in column chunks of this many head dims (registers).
FS_HD constexpr int bwd_dq_chunk(int64_t hd) { return hd % 32 == 0 ? 32 : 16; }

// Q tile, then K and V, two buffers each (16-bit elements).
FS_HD constexpr size_t fwd_smem_bytes(int64_t hd) {
  return static_cast<size_t>(fwd_query_tile(hd) + 4 * kKeyTile) * row_stride(hd) * 2;
}
// K, V; Q and dO two buffers each; dS^T [key tile][BM + 8]; lse and softmax_d two buffers each.
FS_HD constexpr size_t bwd_smem_bytes(int64_t hd) {
  return static_cast<size_t>(2 * bwd_key_tile(hd) + 4 * bwd_query_tile(hd)) * row_stride(hd) * 2 +
         static_cast<size_t>(bwd_key_tile(hd)) * (bwd_query_tile(hd) + 8) * 2 +
         static_cast<size_t>(4 * bwd_query_tile(hd)) * 4;
}

FS_HD constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grids: x = tiles, y = query heads, z = batch (heads split across blocks).
struct Grid3 {
  int64_t x, y, z;
};
FS_HD Grid3 fwd_grid(const AttnLayout& l) {
  return {ceil_div(l.S, fwd_query_tile(l.hd)), l.H, l.B};
}
FS_HD Grid3 bwd_grid(const AttnLayout& l) { return {ceil_div(l.S, bwd_key_tile(l.hd)), l.H, l.B}; }

// Forward: block x runs query tile tiles - 1 - x, so the longest causal rows start first.
FS_HD constexpr int64_t fwd_query_tile_of_block(int64_t block_x, int64_t tiles) {
  return tiles - 1 - block_x;
}
// Forward: key tiles [0, n) reach query tile qt (its last row is min(S, (qt+1) BM) - 1); the
// kernel walks them from n - 1 (the diagonal, masked) down to 0.
FS_HD constexpr int64_t fwd_key_tiles(int64_t qt, int64_t S, int64_t hd) {
  return ceil_div((qt + 1) * fwd_query_tile(hd) < S ? (qt + 1) * fwd_query_tile(hd) : S, kKeyTile);
}
// Forward: key tile kt needs the causal mask in query tile qt when a key of it lies past the
// tile's first query row.
FS_HD constexpr bool fwd_tile_masked(int64_t qt, int64_t kt, int64_t hd) {
  return (kt + 1) * kKeyTile - 1 > qt * fwd_query_tile(hd);
}
// Backward: key tile x (block 0 has the most query tiles: longest first) walks query tiles
// [first, tiles): earlier queries see none of its keys.
FS_HD constexpr int64_t bwd_first_query_tile(int64_t kt, int64_t hd) {
  return kt * bwd_key_tile(hd) / bwd_query_tile(hd);
}
// GQA: query head h reads kv head h / (H / Hkv).
FS_HD constexpr int64_t kv_head(int64_t h, int64_t group) { return h / group; }

// Lane offsets (row, column) into a row-major 16-bit tile for ldmatrix.x4 (NOTE [mma.sync
// fragments] in attention_fa2.cuh; emulated on the host in tests/gpu/attention_fa2_plan_test.cc):
//  a_*:  the A fragment of a 16 x 16 block of a row-major [m][k] tile (Q, K, V as A).
//  b_*:  B fragments of two n8 tiles from a row-major [n][k] tile (K for S = Q K^T).
//  bt_*: B fragments of two n8 tiles from a row-major [k][n] tile, with .trans (V for P V).
//  at_*: the A fragment of a 16 x 16 block from a row-major [k][m] tile, with .trans (dS^T).
FS_HD constexpr int a_row(int lane) { return lane & 15; }
FS_HD constexpr int a_col(int lane) { return (lane >> 4) * 8; }
FS_HD constexpr int b_row(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
FS_HD constexpr int b_col(int lane) { return ((lane >> 3) & 1) * 8; }
FS_HD constexpr int bt_row(int lane) { return (lane & 7) + (((lane >> 3) & 1) << 3); }
FS_HD constexpr int bt_col(int lane) { return (lane >> 4) * 8; }
FS_HD constexpr int at_row(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
FS_HD constexpr int at_col(int lane) { return ((lane >> 3) & 1) * 8; }

static_assert(fwd_smem_bytes(64) == 55296 && fwd_smem_bytes(128) == 87040,
              "NOTE [FlashAttention-2 tiles]");
static_assert(bwd_smem_bytes(64) == 93184 && bwd_smem_bytes(128) == 75264,
              "NOTE [FlashAttention-2 tiles]");

}  // namespace fullshard::cuda::fa2
