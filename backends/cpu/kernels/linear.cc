// nn.Linear: y = x W^T + b with W [N, K] (out_features, in_features), and its three
// gradients. Matmuls run in fp32 through OpenBLAS (bf16/fp16 operands are widened first).
#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/layer_args.h"

namespace fullshard::cpu::detail {

namespace {
struct MKN {
  int64_t M, K, N;
};
MKN linear_dims(const OpCall& op) {
  const LinearArgs l = LinearArgs::decode(op);  // core/runtime/layer_args.h
  return {l.m, l.k, l.n};
}
void expect_numel(const OpCall& op, const TensorMeta& m, int64_t n, const char* what) {
  FULLSHARD_CHECK(m.numel() == n, where(op) + what + " has " + std::to_string(m.numel()) +
                                      " elements, expected " + std::to_string(n));
}

}  // namespace

void linear(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  FULLSHARD_CHECK(op.inputs.size() == 2 || op.inputs.size() == 3,
                  where(op) + "expects (x, W[, b])");
  expect_arity(op, op.inputs.size(), 1);
  const auto [M, K, N] = linear_dims(op);
  const TensorMeta &xm = in_meta(op, 0), &wm = in_meta(op, 1), &ym = out_meta(op, 0);
  expect_numel(op, xm, M * K, "x");
  expect_numel(op, wm, N * K, "W");
  expect_numel(op, ym, M * N, "y");
  F32In x(in[0], xm.dtype, M * K), w(in[1], wm.dtype, N * K);
  F32Out y(out[0], ym.dtype, M * N);
  float beta = 0.0f;
  if (op.inputs.size() == 3) {
    const TensorMeta& bm = in_meta(op, 2);
    expect_numel(op, bm, N, "b");
    std::vector<float> b(static_cast<size_t>(N));
    load_f32(in[2], bm.dtype, 0, N, b.data());
    for (int64_t i = 0; i < M; ++i) std::copy(b.begin(), b.end(), y.data() + i * N);
    beta = 1.0f;
  }
  gemm(false, true, M, N, K, 1.0f, x.data(), K, w.data(), K, beta, y.data(), N);
  y.commit();
}

void linear_backward_input(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  expect_arity(op, 2, 1);  // (grad_y [M, N], W [N, K]) -> grad_x [M, K] = grad_y W
  const auto [M, K, N] = linear_dims(op);
  const TensorMeta &gm = in_meta(op, 0), &wm = in_meta(op, 1), &om = out_meta(op, 0);
  expect_numel(op, gm, M * N, "grad_y");
  expect_numel(op, wm, N * K, "W");
  expect_numel(op, om, M * K, "grad_x");
  F32In g(in[0], gm.dtype, M * N), w(in[1], wm.dtype, N * K);
  F32Out gx(out[0], om.dtype, M * K);
  gemm(false, false, M, K, N, 1.0f, g.data(), N, w.data(), K, 0.0f, gx.data(), K);
  gx.commit();
}

void linear_backward_weight(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  expect_arity(op, 2, 1);  // (grad_y [M, N], x [M, K]) -> grad_W [N, K] = grad_y^T x
  const auto [M, K, N] = linear_dims(op);
  const TensorMeta &gm = in_meta(op, 0), &xm = in_meta(op, 1), &om = out_meta(op, 0);
  expect_numel(op, gm, M * N, "grad_y");
  expect_numel(op, xm, M * K, "x");
  expect_numel(op, om, N * K, "grad_W");
  F32In g(in[0], gm.dtype, M * N), x(in[1], xm.dtype, M * K);
  F32Out gw(out[0], om.dtype, N * K);
  gemm(true, false, N, K, M, 1.0f, g.data(), N, x.data(), K, 0.0f, gw.data(), K);
  gw.commit();
}

void linear_backward_bias(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  expect_arity(op, 1, 1);  // grad_y [M, N] -> grad_b [N] = column sums (double accumulation)
  const auto [M, N] = LinearBiasArgs::decode(op);  // core/runtime/layer_args.h
  expect_numel(op, in_meta(op, 0), M * N, "grad_y");
  expect_numel(op, out_meta(op, 0), N, "grad_b");
  std::vector<double> acc(static_cast<size_t>(N), 0.0);
  std::vector<float> row(static_cast<size_t>(N));
  for (int64_t i = 0; i < M; ++i) {
    load_f32(in[0], in_meta(op, 0).dtype, i * N, N, row.data());
    for (int64_t j = 0; j < N; ++j) acc[j] += row[j];
  }
  std::vector<float> f(acc.begin(), acc.end());
  store_f32(f.data(), out[0], out_meta(op, 0).dtype, 0, N);
}

}  // namespace fullshard::cpu::detail
