// The mixture-of-experts token reordering kernels (core/model/moe_ops.cc, docs/moe.md): the
// stable argsort of the chosen experts, floor division of the sorted positions, row gather /
// scatter / index-add (x[index], out[index] = src, out[index] += g; a negative index counts from
// the end, as Python's does: torchtitan's permutation marks padding -1, the zero row vstack
// appends), the zero row itself, and torchtitan's generate_permute_indices.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/moe_args.h"

namespace fullshard::cpu::detail {

namespace {

// index[i] as a row of a tensor with `rows` rows (Python's negative indexing), checked.
int64_t row_of(const OpCall& op, const int64_t* index, int64_t i, int64_t rows) {
  const int64_t r = index[i] < 0 ? index[i] + rows : index[i];
  FULLSHARD_CHECK(r >= 0 && r < rows, where(op) + "index " + std::to_string(index[i]) +
                                          " out of range for " + std::to_string(rows) + " rows");
  return r;
}

}  // namespace

// torch.argsort(x.view(-1), stable=True).
void moe_argsort(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  RowIndexArgs::decode(op);  // core/runtime/moe_args.h
  const int64_t n = in_meta(op, 0).numel();
  const int64_t* x = static_cast<const int64_t*>(in[0]);
  int64_t* y = static_cast<int64_t*>(out[0]);
  if (n == 0) return;
  std::iota(y, y + n, int64_t{0});
  std::stable_sort(y, y + n, [x](int64_t i, int64_t j) { return x[i] < x[j]; });
}

// x // divisor (floor division, as torch's // on integers).
void moe_floor_divide(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RowIndexArgs a = RowIndexArgs::decode(op);
  const int64_t n = in_meta(op, 0).numel(), d = a.divisor;
  const int64_t* x = static_cast<const int64_t*>(in[0]);
  int64_t* y = static_cast<int64_t*>(out[0]);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t q = x[i] / d;
    y[i] = (x[i] % d != 0 && x[i] < 0) ? q - 1 : q;
  }
}

// y = x[index] over rows of `width` elements (a bit copy: x and y share a dtype).
void moe_gather_rows(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RowIndexArgs a = RowIndexArgs::decode(op);
  const size_t row_bytes = static_cast<size_t>(a.width) * dtype_size(out_meta(op, 0).dtype);
  const int64_t m = in_meta(op, 1).numel();
  const int64_t* index = static_cast<const int64_t*>(in[1]);
  const char* x = static_cast<const char*>(in[0]);
  char* y = static_cast<char*>(out[0]);
  for (int64_t i = 0; i < m; ++i)
    std::memcpy(y + i * row_bytes, x + row_of(op, index, i, a.rows) * row_bytes, row_bytes);
}

// out = zeros [rows, width]; out[index] = src (a later row wins where indices repeat).
void moe_scatter_rows(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RowIndexArgs a = RowIndexArgs::decode(op);
  const size_t row_bytes = static_cast<size_t>(a.width) * dtype_size(out_meta(op, 0).dtype);
  const int64_t m = in_meta(op, 1).numel();
  const int64_t* index = static_cast<const int64_t*>(in[1]);
  const char* src = static_cast<const char*>(in[0]);
  char* y = static_cast<char*>(out[0]);
  if (a.rows > 0) std::memset(y, 0, static_cast<size_t>(a.rows) * row_bytes);
  for (int64_t i = 0; i < m; ++i)
    std::memcpy(y + row_of(op, index, i, a.rows) * row_bytes, src + i * row_bytes, row_bytes);
}

// out = zeros [rows, width]; out[index] += g (index_put_ with accumulate=True), summed in fp32
// in index order and rounded once to the output dtype.
void moe_index_add_rows(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RowIndexArgs a = RowIndexArgs::decode(op);
  const int64_t W = a.width, m = in_meta(op, 1).numel();
  const int64_t* index = static_cast<const int64_t*>(in[1]);
  F32Out y(out[0], out_meta(op, 0).dtype, a.rows * W);
  std::fill(y.data(), y.data() + a.rows * W, 0.0f);
  std::vector<float> g(static_cast<size_t>(W));
  for (int64_t i = 0; i < m; ++i) {
    load_f32(in[0], in_meta(op, 0).dtype, i * W, W, g.data());
    float* row = y.data() + row_of(op, index, i, a.rows) * W;
    for (int64_t w = 0; w < W; ++w) row[w] += g[w];
  }
  y.commit();
}

// torch.vstack((x, x.new_zeros(pad, width))): x's rows, then zero rows to the output's end.
void moe_pad_row(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RowIndexArgs a = RowIndexArgs::decode(op);
  const size_t row_bytes = static_cast<size_t>(a.width) * dtype_size(out_meta(op, 0).dtype);
  const size_t out_bytes = static_cast<size_t>(out_meta(op, 0).numel()) *
                           dtype_size(out_meta(op, 0).dtype);
  char* y = static_cast<char*>(out[0]);
  const size_t in_bytes = static_cast<size_t>(a.rows) * row_bytes;
  if (in_bytes > 0) std::memcpy(y, in[0], in_bytes);
  std::memset(y + in_bytes, 0, out_bytes - in_bytes);
}

// generate_permute_indices (torchtitan/models/moe/kernels.py at pytorch/torchtitan@8631e19):
// the counts [ranks * E] (sender-major; one sender here) give each expert a group of
// max(total, align) rows rounded up to align; group e lists its tokens' rows (each sender's
// chunk in order, rows numbered as the senders' chunks are laid out) then -1s; the rest of the
// permutation is -1. offsets are the groups' exclusive ends (m_offsets).
void moe_permute_indices(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const PermuteIndicesArgs a = PermuteIndicesArgs::decode(op);
  const int64_t E = a.experts, P = a.padded_rows();
  const int64_t n_counts = in_meta(op, 0).numel(), ranks = n_counts / E;
  FULLSHARD_CHECK(ranks >= 1 && ranks * E == n_counts, where(op) + "counts are not [ranks * E]");
  F32In counts(in[0], in_meta(op, 0).dtype, n_counts);
  std::vector<int64_t> c(static_cast<size_t>(n_counts)), start(static_cast<size_t>(n_counts));
  int64_t total = 0;
  for (int64_t i = 0; i < n_counts; ++i) {
    const float v = counts[i];
    FULLSHARD_CHECK(v >= 0 && v == static_cast<float>(static_cast<int64_t>(v)),
                    where(op) + "token counts must be whole and non-negative");
    c[i] = static_cast<int64_t>(v);
    start[i] = total;
    total += c[i];
  }
  FULLSHARD_CHECK(total <= a.tokens, where(op) + "counts sum to " + std::to_string(total) +
                                         " routed rows, more than the " + std::to_string(a.tokens) +
                                         " recorded");
  int64_t* perm = static_cast<int64_t*>(out[0]);
  int64_t* offs = static_cast<int64_t*>(out[1]);
  std::fill(perm, perm + P, int64_t{-1});
  int64_t end = 0;
  for (int64_t e = 0; e < E; ++e) {
    int64_t write = end, sum = 0;
    for (int64_t r = 0; r < ranks; ++r) {
      const int64_t i = r * E + e;
      for (int64_t t = 0; t < c[i] && write < P; ++t) perm[write++] = start[i] + t;
      sum += c[i];
    }
    end += (std::max(sum, a.align) + a.align - 1) / a.align * a.align;
    offs[e] = end;
  }
}

}  // namespace fullshard::cpu::detail
