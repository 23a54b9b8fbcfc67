#pragma once
// Index maps of the mixture-of-experts kernels (moe_*.cu), shared by the device and the host
// tests (tests/gpu/cuda_moe_plan_test.cc runs them against the CPU kernels without a GPU): one
// definition of each index rule the CPU kernels apply (backends/cpu/kernels/moe_*.cc).
// Plain C++ when not compiled by nvcc.
#include <cstdint>

#include "backends/cuda/kernels/index_math.h"

namespace fullshard::cuda {

// index as a row of a tensor with `rows` rows, Python's negative indexing (torchtitan's -1
// padding, the zero row vstack appends); -1 when out of range. The CPU kernel throws there; a
// device kernel cannot, so it skips the entry (NOTE [MoE kernels on the GPU] in moe_plan.h).
FS_HD int64_t moe_row_of(int64_t index, int64_t rows) {
  const int64_t r = index < 0 ? index + rows : index;
  return r >= 0 && r < rows ? r : -1;
}

// x // d on integers (Python's floor division), d >= 1.
FS_HD int64_t moe_floor_div(int64_t x, int64_t d) {
  const int64_t q = x / d;
  return (x % d != 0 && x < 0) ? q - 1 : q;
}

// torch.topk's order (sorted, largest first): NaN above every number, equal scores keep the
// lower expert first. A strict total order over (score, expert), so the k-th pick is the
// largest element strictly after the (k-1)-th: no per-row scratch.
FS_HD bool moe_topk_before(float a, int64_t ia, float b, int64_t ib) {
  const bool na = a != a, nb = b != b;
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

// The stable argsort's position of element i: the keys below x[i], plus the equal keys before i.
// The caller counts `less` and `equal_before` over every key (moe_reorder.cu tiles them).
FS_HD int64_t moe_argsort_position(int64_t less, int64_t equal_before) { return less + equal_before; }

// generate_permute_indices' group end after `prev_end` for an expert with `total` tokens over
// every sender: max(total, align) rounded up to align.
FS_HD int64_t moe_group_end(int64_t prev_end, int64_t total, int64_t align) {
  const int64_t t = total > align ? total : align;
  return prev_end + (t + align - 1) / align * align;
}

// Entry p of the permutation, from the counts [ranks * E] (sender-major), their exclusive starts
// (the rows of the senders' chunks) and the groups' ends: group e lists each sender's rows for
// e in sender order, then -1; past the last group, -1.
FS_HD int64_t moe_permute_entry(int64_t p, const int64_t* counts, const int64_t* starts,
                                const int64_t* ends, int64_t experts, int64_t ranks) {
  int64_t lo = 0, hi = experts;  // the first group whose end is past p
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (ends[mid] > p) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  if (lo == experts) return -1;
  int64_t q = p - (lo == 0 ? 0 : ends[lo - 1]);
  for (int64_t r = 0; r < ranks; ++r) {
    const int64_t c = counts[r * experts + lo];
    if (q < c) return starts[r * experts + lo] + q;
    q -= c;
  }
  return -1;
}

// NOTE [Grouped GEMM tiles]: the grouped GEMMs read the group ends `offs` on the device (no
// host copy, no sync), so the grid is sized for the most tiles any offsets can give: a group of
// L rows takes ceil(L / tile) row tiles, and sum ceil(L_e / tile) <= rows / tile + E. Block t
// walks the groups to find its (group, first row); blocks past the last tile return. Offsets
// are clamped into [previous end, rows] (the CPU kernel refuses others; a device kernel cannot).
FS_HD int64_t moe_grouped_max_tiles(int64_t rows, int64_t experts, int64_t tile) {
  return (rows + tile - 1) / tile + experts;
}
FS_HD int64_t moe_group_bound(const int64_t* offs, int64_t e, int64_t prev, int64_t rows) {
  int64_t b = offs[e];
  if (b < prev) b = prev;
  if (b > rows) b = rows;
  return b;
}
// Tile t in group order: true with its group and rows [row0, row1) when it exists.
FS_HD bool moe_grouped_tile(int64_t t, const int64_t* offs, int64_t experts, int64_t rows,
                            int64_t tile, int64_t& group, int64_t& row0, int64_t& row1) {
  int64_t begin = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t end = moe_group_bound(offs, e, begin, rows);
    const int64_t n = (end - begin + tile - 1) / tile;
    if (t < n) {
      group = e;
      row0 = begin + t * tile;
      row1 = row0 + tile < end ? row0 + tile : end;
      return true;
    }
    t -= n;
    begin = end;
  }
  return false;
}

}  // namespace fullshard::cuda
