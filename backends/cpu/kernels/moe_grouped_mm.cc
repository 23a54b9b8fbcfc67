// torch._grouped_mm as torchtitan's GroupedExperts calls it (x [P, k], w [E, n, k] transposed,
// offs [E] the groups' exclusive row ends) and its two backwards, one OpenBLAS GEMM per
// non-empty group in fp32. Rows past the last offset belong to no group: the forward and the
// input gradient write zeros there (PyTorch leaves them unspecified; torchtitan's unpermute
// sends them to the dropped pad row) and the weight gradient ignores them.
#include <algorithm>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/moe_args.h"

namespace fullshard::cpu::detail {

namespace {

// The groups' [begin, end) rows from offs, checked: non-decreasing and within the rows.
std::vector<int64_t> group_bounds(const OpCall& op, const void* offs, const GroupedMmArgs& a) {
  const int64_t* o = static_cast<const int64_t*>(offs);
  std::vector<int64_t> b(static_cast<size_t>(a.experts + 1), 0);
  for (int64_t e = 0; e < a.experts; ++e) {
    FULLSHARD_CHECK(o[e] >= b[e] && o[e] <= a.rows,
                    where(op) + "group offsets must be non-decreasing and at most the rows");
    b[e + 1] = o[e];
  }
  return b;
}

}  // namespace

// y[r] = x[r] w[e]^T for each row r of group e.
void grouped_mm(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const GroupedMmArgs a = GroupedMmArgs::decode(op);  // core/runtime/moe_args.h
  const std::vector<int64_t> b = group_bounds(op, in[2], a);
  F32In x(in[0], in_meta(op, 0).dtype, a.rows * a.k),
      w(in[1], in_meta(op, 1).dtype, a.experts * a.n * a.k);
  F32Out y(out[0], out_meta(op, 0).dtype, a.rows * a.n);
  for (int64_t e = 0; e < a.experts; ++e)
    gemm(false, true, b[e + 1] - b[e], a.n, a.k, 1.0f, x.data() + b[e] * a.k, a.k,
         w.data() + e * a.n * a.k, a.k, 0.0f, y.data() + b[e] * a.n, a.n);
  std::fill(y.data() + b[a.experts] * a.n, y.data() + a.rows * a.n, 0.0f);
  y.commit();
}

// g_x[r] = g[r] w[e] for each row r of group e.
void grouped_mm_backward_input(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const GroupedMmArgs a = GroupedMmArgs::decode(op);
  const std::vector<int64_t> b = group_bounds(op, in[2], a);
  F32In g(in[0], in_meta(op, 0).dtype, a.rows * a.n),
      w(in[1], in_meta(op, 1).dtype, a.experts * a.n * a.k);
  F32Out gx(out[0], out_meta(op, 0).dtype, a.rows * a.k);
  for (int64_t e = 0; e < a.experts; ++e)
    gemm(false, false, b[e + 1] - b[e], a.k, a.n, 1.0f, g.data() + b[e] * a.n, a.n,
         w.data() + e * a.n * a.k, a.k, 0.0f, gx.data() + b[e] * a.k, a.k);
  std::fill(gx.data() + b[a.experts] * a.k, gx.data() + a.rows * a.k, 0.0f);
  gx.commit();
}

// g_w[e] = g[group e]^T x[group e] ([n, k]); an empty group's gradient is zero.
void grouped_mm_backward_weight(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const GroupedMmArgs a = GroupedMmArgs::decode(op);
  const std::vector<int64_t> b = group_bounds(op, in[2], a);
  F32In g(in[0], in_meta(op, 0).dtype, a.rows * a.n), x(in[1], in_meta(op, 1).dtype, a.rows * a.k);
  F32Out gw(out[0], out_meta(op, 0).dtype, a.experts * a.n * a.k);
  for (int64_t e = 0; e < a.experts; ++e)  // k = 0 rows: gemm writes zeros (gemm.h)
    gemm(true, false, a.n, a.k, b[e + 1] - b[e], 1.0f, g.data() + b[e] * a.n, a.n,
         x.data() + b[e] * a.k, a.k, 0.0f, gw.data() + e * a.n * a.k, a.k);
  gw.commit();
}

}  // namespace fullshard::cpu::detail
