// Context parallelism's ring-attention kinds (core/runtime/context_parallel_args.h): the merge
// of a round's attention block into the running output (PyTorch's _SDPAMerger, fp32) and the
// row-range add of the ring backward's gradient sums. The rounds' attention itself is
// attention.cc's kernel on strided halves.
#include <cmath>
#include <vector>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/context_parallel_args.h"

namespace fullshard::cpu::detail {

// out' = out - sigmoid(block_lse - lse) * (out - block_out); lse' = lse - logsigmoid(lse -
// block_lse) over the block's rows (the last block_len of each batch when partial); the other
// rows are copied. Scratch outputs (the eager merge's) are not written.
void sdpa_merge(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const SdpaMergeArgs a = SdpaMergeArgs::decode(op);
  const int64_t D = a.heads * a.head_dim, rows = a.batch * a.len;
  const float* acc = static_cast<const float*>(in[0]);
  const float* lse = static_cast<const float*>(in[1]);
  F32In blk(in[2], in_meta(op, 2).dtype, a.batch * a.block_len * D);
  const float* blse = static_cast<const float*>(in[3]);
  float* o = static_cast<float*>(out[0]);
  float* l = static_cast<float*>(out[1]);
  if (rows * D > 0) std::copy_n(acc, rows * D, o);
  if (a.batch * a.heads * a.len > 0) std::copy_n(lse, a.batch * a.heads * a.len, l);
  const int64_t first = a.partial ? a.len - a.block_len : 0;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h)
      for (int64_t s = 0; s < a.block_len; ++s) {
        const int64_t pos = first + s;
        const float old = lse[(b * a.heads + h) * a.len + pos];
        const float bl = blse[(b * a.heads + h) * a.block_len + s];
        const float w = 1.0f / (1.0f + std::exp(-(bl - old)));  // sigmoid(bl - old)
        const float x = old - bl;  // logsigmoid(x) = min(x, 0) - log1p(exp(-|x|))
        l[(b * a.heads + h) * a.len + pos] =
            old - (std::min(x, 0.0f) - std::log1p(std::exp(-std::fabs(x))));
        const float* br = blk.data() + (b * a.block_len + s) * D + h * a.head_dim;
        float* orow = o + (b * a.len + pos) * D + h * a.head_dim;
        const float* arow = acc + (b * a.len + pos) * D + h * a.head_dim;
        for (int64_t e = 0; e < a.head_dim; ++e) orow[e] = arow[e] - w * (arow[e] - br[e]);
      }
}

// dst rows [begin, begin + n) of each batch += src (fp32 math, in dst's dtype).
void seq_rows_add(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const SeqRowsArgs a = SeqRowsArgs::decode(op);
  const DType dd = out_meta(op, 0).dtype, sd = in_meta(op, 1).dtype;
  float x[kChunk], y[kChunk];
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t d0 = (b * a.rows + a.begin) * a.width, s0 = b * a.n * a.width;
    const int64_t total = a.n * a.width;
    for (int64_t i = 0; i < total; i += kChunk) {
      const int64_t m = std::min(kChunk, total - i);
      load_f32(out[0], dd, d0 + i, m, x);
      load_f32(in[1], sd, s0 + i, m, y);
      for (int64_t k = 0; k < m; ++k) x[k] += y[k];
      store_f32(x, out[0], dd, d0 + i, m);
    }
  }
}

}  // namespace fullshard::cpu::detail
