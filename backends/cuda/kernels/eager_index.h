#pragma once
// Index maps of the eager-decomposition kernels (eager.cu): one definition of each address
// computation, plain C++ when not compiled by nvcc (FS_HD of index_math.h), so host code can run
// the same maps against the CPU kernels (backends/cpu/kernels/eager.cc, rope.cc).
#include <cstdint>

#include "backends/cuda/kernels/index_math.h"

namespace fullshard::cuda {

// kMulBroadcast: a [rows, D] times b broadcast per row (b[r]), per column (b[d]) or per head
// (b [rows, hd] over the D / hd heads of each row: HF's q * cos).
enum class Bcast : int { kRow = 0, kColumn = 1, kHead = 2 };
FS_HD int64_t bcast_index(Bcast mode, int64_t r, int64_t d, int64_t hd) {
  return mode == Bcast::kHead ? r * hd + d % hd : mode == Bcast::kColumn ? d : r;
}

// kRepeatKV: y [rows, kv * rep * hd] holds head q of y at q * hd; it is kv head q / rep of the
// same row, so element e of y copies element repeat_kv_source(e) of x [rows, kv * hd]
// ((r * kv + h) * rep + j = q, and q / rep = r * kv + h).
FS_HD int64_t repeat_kv_source(int64_t e, int64_t rep, int64_t hd) {
  const int64_t q = e / hd;
  return (q / rep) * hd + (e - q * hd);
}
// kRepeatKVBackward: copy j (< rep) of element e of gx [rows, kv * hd] in g [rows, kv * rep * hd].
FS_HD int64_t repeat_kv_copy(int64_t e, int64_t j, int64_t rep, int64_t hd) {
  const int64_t q = e / hd;
  return (q * rep + j) * hd + (e - q * hd);
}

// kRotateHalfCat: element e of y [blocks, hd] = cat(neg, x[.., :hd/2]) per block: true with
// `src` an index of neg [blocks, hd/2] (first half), false with `src` an index of x [blocks, hd].
FS_HD bool rotate_half_source(int64_t e, int64_t hd, int64_t& src) {
  const int64_t b = e / hd, c = e - b * hd, half = hd / 2;
  if (c < half) {
    src = b * half + c;
    return true;
  }
  src = e - half;  // b * hd + (c - half)
  return false;
}

}  // namespace fullshard::cuda
