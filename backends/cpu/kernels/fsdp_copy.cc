// FSDP2's copy kernels around its collectives: all-gather copy-in (foreach copy of the
// sharded parameters into this rank's slice), copy-out (split_with_sizes_copy of the
// rank-major all-gather output into per-parameter unsharded storage) and the
// reduce-scatter copy-in (torch._chunk_cat(grads, dim=0, num_chunks=W)).
#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/copy_args.h"

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
  decode_all_gather_copy_in(op);  // core/runtime/copy_args.h
  const TensorMeta& s = out_meta(op, 0);
  int64_t off = 0;
  for (size_t j = 0; j < op.inputs.size(); ++j) {
    const TensorMeta& m = in_meta(op, j);
    convert(in[j], m.dtype, 0, out[0], s.dtype, off, m.numel());
    off += m.numel();
  }
}

void all_gather_copy_out(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // ag [W * row] (rank-major rows of n_0 ++ ... ++ n_{P-1}) -> out_j [W * n_j]:
  // out_j[r*n_j + e] = ag[r*row + off_j + e] (AllGatherCopyOutArgs, core/runtime/copy_args.h).
  const AllGatherCopyOutArgs a = AllGatherCopyOutArgs::decode(op);
  const int64_t W = a.world, row = a.row;
  const TensorMeta& ag = in_meta(op, 0);
  int64_t off = 0;
  for (size_t j = 0; j < a.sizes.size(); ++j) {
    const int64_t n = a.sizes[j];
    const TensorMeta& m = out_meta(op, j);
    for (int64_t r = 0; r < W; ++r)
      convert(in[0], ag.dtype, r * row + off, out[j], m.dtype, r * n, n);
    off += n;
  }
}

void chunk_cat(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // grads g_j [d0_j, ...] -> out [W * row]: chunk c_j = ceil(d0_j / W) rows; rank row r is
  // the concatenation over j of g_j rows [r*c_j, (r+1)*c_j) zero-padded to c_j rows.
  const ChunkCatArgs c = ChunkCatArgs::decode(op);  // core/runtime/copy_args.h
  const int64_t W = c.world, row = c.row;
  const std::vector<ChunkCatArgs::Part>& parts = c.parts;
  const TensorMeta& o = out_meta(op, 0);
  for (int64_t r = 0; r < W; ++r) {
    int64_t off = r * row;
    for (size_t j = 0; j < parts.size(); ++j) {
      const ChunkCatArgs::Part& p = parts[j];
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
