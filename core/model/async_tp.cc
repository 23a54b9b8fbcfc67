#include "core/model/async_tp.h"

#include <utility>

#include "core/model/op_util.h"
#include "core/runtime/layer_args.h"
#include "core/runtime/tensor_parallel_args.h"

// NOTE [Async TP]: torchtitan's enable_async_tp turns on inductor's micro-pipeline TP pass
// (torch/_inductor/fx_passes/micro_pipeline_tp.py) and symmetric memory on the tp group; in the
// compiled forward and backward graphs the pass rewrites
// - all_gather_tensor(A_shard) feeding matmuls A @ B_i into one fused_all_gather_matmul(A_shard,
//   [B_0, ...]) that also returns the gathered A: in a Llama block the gathers before wq / wk / wv
//   and w1 / w3, and in backward those of wo's and w2's output gradients;
// - reduce_scatter_tensor(A @ B) of one product with one user into fused_matmul_reduce_scatter(A,
//   B): wo's and w2's forward. The backward input-gradient reduce-scatters stay plain (their input
//   sums two or three products).
// Both restride A so the gathered / scattered dim leads (a copy when the batch has more than one
// sequence); the fused reduce-scatter writes the stacked partial products [M, N], then sums its
// rows; both use the group's symmetric workspace, outside the caching allocator. What is saved for
// backward does not change (the linears save the gathered input). Each buffer:
// docs/fsdp2-correspondence.md, "Asynchronous TP".

namespace fullshard::ops::tp {
using detail::kCompute;
using detail::make_op;
using detail::result;

namespace {

// restride_A_*: [B, R, D] -> a contiguous [R, B, D] copy when B > 1 (freed by the caller).
Tensor restride(Backend& b, const Tensor& x, const std::string& name) {
  const Shape& s = x.shape();
  if (s[0] == 1) return x;
  Tensor r = empty_tensor(b, {x.dtype(), {s[1], s[0], s[2]}}, MemCategory::kTemporary, kCompute,
                           name + " restride");
  b.launch(kCompute, make_op(OpKind::kTransposeBlocks, name + " restride", {x.ref()}, {r.ref()}, 0,
                             TransposeBlocksArgs{s[0], s[1], s[2]}));
  return r;
}

}  // namespace

std::vector<Value> all_gather_linears(ExecContext& c, Value x,
                                      const std::vector<const Param*>& weights,
                                      const std::vector<std::string>& names,
                                      const TensorParallel& tp, const std::string& name) {
  Backend& b = c.backend();
  const Shape& s = x.t.shape();
  FULLSHARD_CHECK(s.size() == 3 && !weights.empty() && weights.size() == names.size(),
                  name + ": expects [B, S/tp, D] and one name per weight");
  const int64_t B = s[0], Sl = s[1], D = s[2], T = tp.degree, M = B * Sl * T;
  Tensor shard = restride(b, x.t, name);
  Tensor gathered = c.empty({x.t.dtype(), {B, Sl * T, D}}, MemCategory::kActivation, name);
  std::vector<TensorRef> in = {shard.ref()};
  std::vector<TensorRef> out = {gathered.ref()};
  std::vector<Tensor> ys;
  int64_t n_sum = 0;
  double flops = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    Tensor w = detail::param_tensor(*weights[i]);
    FULLSHARD_CHECK(weights[i]->shape[1] == D,
                    names[i] + ": input features do not match the weight");
    const int64_t N = weights[i]->shape[0];
    ys.push_back(c.empty({w.dtype(), {B, Sl * T, N}}, MemCategory::kActivation, names[i]));
    in.push_back(w.ref());
    out.push_back(ys.back().ref());
    n_sum += N;
    flops += 2.0 * M * D * N;
  }
  c.launch(make_op(OpKind::kAllGatherMatmul, name + " fused_all_gather_matmul", std::move(in),
                   std::move(out), flops, CollectiveMatmulArgs{M / T, D, n_sum, T}));
  shard = Tensor();
  Value a = result(c, gathered, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    c.record(Node{name, {x.id}, {a.id}, [&b, tp, name](std::vector<Tensor>& g) {
                    return std::vector<Tensor>{
                        scatter_seq(b, g[0], tp, MemCategory::kTemporary, name + " backward")};
                  }});
  }
  std::vector<Value> outs;
  for (size_t i = 0; i < weights.size(); ++i) {
    outs.push_back(result(c, ys[i], true));
    detail::record_linear(c, a, *weights[i], nullptr, outs.back(), names[i]);
  }
  return outs;
}

Value linear_reduce_scatter(ExecContext& c, Value x, const Param& weight, const TensorParallel& tp,
                            const std::string& name) {
  Backend& b = c.backend();
  Tensor w = detail::param_tensor(weight);
  const Shape& s = x.t.shape();
  const int64_t K = weight.shape[1], N = weight.shape[0], T = tp.degree;
  FULLSHARD_CHECK(s.size() == 3 && s[2] == K && s[1] % T == 0,
                  name + ": expects [B, S, K] with S divisible by tp");
  const int64_t B = s[0], S = s[1], M = B * S;
  Tensor a = restride(b, x.t, name);
  Tensor partials =
      empty_tensor(b, {w.dtype(), {M, N}}, MemCategory::kTemporary, kCompute, name + " partials");
  Tensor y = c.empty({w.dtype(), {B, S / T, N}}, MemCategory::kActivation, name);
  c.launch(make_op(OpKind::kMatmulReduceScatter, name + " fused_matmul_reduce_scatter",
                   {a.ref(), w.ref()}, {partials.ref(), y.ref()}, 2.0 * M * K * N,
                   CollectiveMatmulArgs{M / T, K, N, T}));
  partials = Tensor();
  a = Tensor();
  Value out = result(c, y, true);
  if (c.recording()) {
    const Param* pw = &weight;
    Tensor xs = x.t;
    c.record(Node{
        name,
        {x.id},
        {out.id},
        [&b, pw, xs, tp, B, S, K, N, name, need = x.requires_grad()](std::vector<Tensor>& g) {
          const int64_t T = tp.degree, M = B * S;
          Tensor w = pw->binding->unsharded();
          Tensor shard = restride(b, g[0], name + " backward");
          Tensor gathered = empty_tensor(b, {g[0].dtype(), {B, S, N}}, MemCategory::kTemporary,
                                          kCompute, name + " backward all_gather");
          Tensor gx = detail::grad_like(b, xs, name + " grad_input");
          b.launch(kCompute,
                   make_op(OpKind::kAllGatherMatmul, name + " backward fused_all_gather_matmul",
                           {shard.ref(), w.ref()}, {gathered.ref(), gx.ref()}, 2.0 * M * N * K,
                           CollectiveMatmulArgs{M / T, N, K, T}));
          shard = Tensor();
          Tensor gw = detail::new_param_grad(b, *pw);
          b.launch(kCompute, make_op(OpKind::kLinearBackwardWeight, name + " backward_weight",
                                     {gathered.ref(), xs.ref()}, {gw.ref()}, 2.0 * M * K * N,
                                     LinearArgs{M, K, N}));
          pw->binding->accumulate_grad(b, std::move(gw));
          if (!need) gx = Tensor();
          return std::vector<Tensor>{gx};
        }});
  }
  return out;
}

uint64_t symmetric_workspace_bytes(int64_t batch, int64_t seq, int64_t dim, int tp,
                                   uint64_t dtype_bytes) {
  if (tp <= 1) return 0;
  const uint64_t chunk = static_cast<uint64_t>(batch) * static_cast<uint64_t>(seq / tp) *
                         static_cast<uint64_t>(dim) * dtype_bytes;
  return 2 * chunk;  // fused_matmul_reduce_scatter's two output chunks; the all-gather needs one
}

}  // namespace fullshard::ops::tp
