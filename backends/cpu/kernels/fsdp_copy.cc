// FSDP2's copy kernels around its collectives: all-gather copy-in (foreach copy of the
// sharded parameters into this rank's slice), copy-out (split_with_sizes_copy of the
// rank-major all-gather output into per-parameter unsharded storage) and the
// reduce-scatter copy-in (torch._chunk_cat(grads, dim=0, num_chunks=W)).
#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"

namespace fullshard::cpu::detail {

namespace {
void zero(void* dst, DType dt, int64_t offset, int64_t n) {
  if (n > 0)
    std::memset(static_cast<char*>(dst) + offset * dtype_size(dt), 0,
                static_cast<size_t>(n * dtype_size(dt)));
}
}  // namespace

void all_gather_copy_in(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // (shard_0, ..., shard_{P-1}) -> slice = shard_0 ++ ... ++ shard_{P-1}, cast to the slice dtype.
  FULLSHARD_CHECK(!op.inputs.empty() && op.outputs.size() == 1,
                  where(op) + "expects P inputs and one output");
  const TensorMeta& s = out_meta(op, 0);
  int64_t off = 0;
  for (size_t j = 0; j < op.inputs.size(); ++j) off += in_meta(op, j).numel();
  FULLSHARD_CHECK(off == s.numel(), where(op) + "inputs hold " + std::to_string(off) +
                                        " elements, slice " + std::to_string(s.numel()));
  off = 0;
  for (size_t j = 0; j < op.inputs.size(); ++j) {
    const TensorMeta& m = in_meta(op, j);
    convert(in[j], m.dtype, 0, out[0], s.dtype, off, m.numel());
    off += m.numel();
  }
}

void all_gather_copy_out(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // ag [W * row] (rank-major rows of n_0 ++ ... ++ n_{P-1}) -> out_j [W * n_j]:
  // out_j[r*n_j + e] = ag[r*row + off_j + e]. iargs = {n_0, ..., n_{P-1}, W}.
  const size_t P = op.outputs.size();
  FULLSHARD_CHECK(op.inputs.size() == 1 && P >= 1 && op.iargs.size() == P + 1,
                  where(op) + "expects one input, P outputs and iargs = {n_0..n_{P-1}, W}");
  const int64_t W = op.iargs[P];
  FULLSHARD_CHECK(W >= 1, where(op) + "world must be positive");
  int64_t row = 0;
  for (size_t j = 0; j < P; ++j) row += op.iargs[j];
  const TensorMeta& ag = in_meta(op, 0);
  FULLSHARD_CHECK(ag.numel() == W * row, where(op) + "all-gather output is not W * sum(n_j)");
  int64_t off = 0;
  for (size_t j = 0; j < P; ++j) {
    const int64_t n = op.iargs[j];
    const TensorMeta& m = out_meta(op, j);
    FULLSHARD_CHECK(m.numel() == W * n,
                    where(op) + "output " + std::to_string(j) + " is not W * n_j");
    for (int64_t r = 0; r < W; ++r)
      convert(in[0], ag.dtype, r * row + off, out[j], m.dtype, r * n, n);
    off += n;
  }
}

void chunk_cat(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // grads g_j [d0_j, ...] -> out [W * row]: chunk c_j = ceil(d0_j / W) rows; rank row r is
  // the concatenation over j of g_j rows [r*c_j, (r+1)*c_j) zero-padded to c_j rows.
  FULLSHARD_CHECK(
      !op.inputs.empty() && op.outputs.size() == 1 && !op.iargs.empty() && op.iargs[0] >= 1,
      where(op) + "expects grads, one output and iargs = {W}");
  const int64_t W = op.iargs[0];
  struct Part {
    int64_t d0, row_numel, chunk_rows;
  };
  std::vector<Part> parts;
  int64_t row = 0;
  for (const auto& r : op.inputs) {
    const Shape& sh = r.meta.shape;
    Part p;
    p.d0 = sh.empty() ? 1 : sh[0];
    p.row_numel = 1;
    for (size_t i = 1; i < sh.size(); ++i) p.row_numel *= sh[i];
    p.chunk_rows = (p.d0 + W - 1) / W;
    parts.push_back(p);
    row += p.chunk_rows * p.row_numel;
  }
  const TensorMeta& o = out_meta(op, 0);
  FULLSHARD_CHECK(o.numel() == W * row, where(op) + "output has " + std::to_string(o.numel()) +
                                            " elements, expected W * padded row " +
                                            std::to_string(W * row));
  for (int64_t r = 0; r < W; ++r) {
    int64_t off = r * row;
    for (size_t j = 0; j < parts.size(); ++j) {
      const Part& p = parts[j];
      const int64_t first = std::min(p.d0, r * p.chunk_rows);
      const int64_t real = std::min(p.d0, first + p.chunk_rows) - first;
      const int64_t padded = p.chunk_rows * p.row_numel, n = real * p.row_numel;
      convert(in[j], in_meta(op, j).dtype, first * p.row_numel, out[0], o.dtype, off, n);
      zero(out[0], o.dtype, off + n, padded - n);
      off += padded;
    }
  }
}

}  // namespace fullshard::cpu::detail
