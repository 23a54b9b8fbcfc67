#include "core/model/moe_ops.h"

#include "core/model/op_util.h"
#include "core/runtime/moe_args.h"
#include "core/runtime/eager_args.h"

namespace fullshard::ops::moe {

using detail::el;
using detail::grad_like;
using detail::kCompute;
using detail::make_op;
using detail::result;

namespace {

OpCall router_op(OpKind kind, const std::string& name, std::vector<TensorRef> in,
                 std::vector<TensorRef> out, double flops, int64_t tokens, int64_t experts,
                 int64_t top_k) {
  OpCall op = make_op(kind, name, std::move(in), std::move(out), flops);
  RouterArgs{tokens, experts, top_k}.encode(op);
  return op;
}

OpCall row_op(OpKind kind, const std::string& name, std::vector<TensorRef> in,
              std::vector<TensorRef> out, int64_t rows, int64_t width, int64_t divisor = 1) {
  OpCall op = make_op(kind, name, std::move(in), std::move(out), 0);
  RowIndexArgs{rows, width, divisor}.encode(op);
  return op;
}

int64_t last_dim(const Tensor& t) { return t.shape().empty() ? 1 : t.shape().back(); }

// [N, E] scores in and out; the node saves the output y and runs `bwd` on (g, y).
Value scores_saving_output(ExecContext& c, Value x, OpKind fwd, OpKind bwd, double flops_per_el,
                           const std::string& name) {
  Backend& b = c.backend();
  const int64_t E = last_dim(x.t), N = x.t.numel() / E;
  Tensor y = c.empty(x.t.meta(), MemCategory::kActivation, name);
  c.launch(router_op(fwd, name, {x.t.ref()}, {y.ref()}, flops_per_el * el(y), N, E, 0));
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    c.record(Node{name, {x.id}, {out.id}, [&b, y, bwd, N, E, name](std::vector<Tensor>& g) {
                    Tensor gx = grad_like(b, y, name + " grad_input");
                    b.launch(kCompute, router_op(bwd, name + " backward", {g[0].ref(), y.ref()},
                                                 {gx.ref()}, 3 * el(y), N, E, 0));
                    return std::vector<Tensor>{gx};
                  }});
  }
  return out;
}

}  // namespace

Value softmax(ExecContext& c, Value x, const std::string& name) {
  return scores_saving_output(c, std::move(x), OpKind::kSoftmax, OpKind::kSoftmaxBackward, 5, name);
}

Value sigmoid(ExecContext& c, Value x, const std::string& name) {
  return scores_saving_output(c, std::move(x), OpKind::kSigmoid, OpKind::kSigmoidBackward, 4, name);
}

std::pair<Value, Tensor> topk(ExecContext& c, Value scores, int64_t k, const std::string& name) {
  Backend& b = c.backend();
  const int64_t E = last_dim(scores.t), N = scores.t.numel() / E;
  Tensor values = c.empty({scores.t.dtype(), {N, k}}, MemCategory::kActivation, name);
  Tensor indices = c.empty({DType::kInt64, {N, k}}, MemCategory::kActivation, name + " indices");
  c.launch(router_op(OpKind::kTopK, name, {scores.t.ref()}, {values.ref(), indices.ref()},
                     el(scores.t), N, E, k));
  Value out = result(c, values, scores.requires_grad());
  if (c.recording() && scores.requires_grad()) {
    const TensorMeta in_meta = scores.t.meta();
    c.record(Node{
        name, {scores.id}, {out.id}, [&b, indices, in_meta, N, E, k, name](std::vector<Tensor>& g) {
          Tensor gx =
              empty_tensor(b, in_meta, MemCategory::kTemporary, kCompute, name + " grad_input");
          b.launch(kCompute,
                   router_op(OpKind::kTopKBackward, name + " backward", {g[0].ref(), indices.ref()},
                             {gx.ref()}, static_cast<double>(N * k), N, E, k));
          return std::vector<Tensor>{gx};
        }});
  }
  return {out, indices};
}

Tensor router_choice(ExecContext& c, const Tensor& scores, const Tensor& bias, int64_t groups,
                     int64_t limited, const std::string& name) {
  const int64_t E = last_dim(scores), N = scores.numel() / E;
  Tensor y = c.empty(scores.meta(), MemCategory::kActivation, name);
  std::vector<TensorRef> in{scores.ref()};
  if (bias) in.push_back(bias.ref());
  // The add, the groups' top-2 sums and the mask: about 3 flops per score.
  OpCall op = make_op(OpKind::kRouterChoice, name, std::move(in), {y.ref()},
                      3.0 * static_cast<double>(N * E));
  RouterChoiceArgs{N, E, groups, limited}.encode(op);
  c.launch(op);
  return y;
}

Value gather_scores(ExecContext& c, Value scores, const Tensor& indices, const std::string& name) {
  Backend& b = c.backend();
  const int64_t E = last_dim(scores.t), N = scores.t.numel() / E, K = last_dim(indices);
  Tensor y = c.empty({DType::kFloat32, {N, K}}, MemCategory::kActivation, name);
  c.launch(router_op(OpKind::kGatherScores, name, {scores.t.ref(), indices.ref()}, {y.ref()},
                     0, N, E, K));
  Value out = result(c, y, scores.requires_grad());
  if (c.recording() && scores.requires_grad()) {
    const TensorMeta in_meta = scores.t.meta();
    c.record(Node{
        name, {scores.id}, {out.id}, [&b, indices, in_meta, N, E, K, name](std::vector<Tensor>& g) {
          Tensor gx =
              empty_tensor(b, in_meta, MemCategory::kTemporary, kCompute, name + " grad_input");
          b.launch(kCompute,
                   router_op(OpKind::kTopKBackward, name + " backward", {g[0].ref(), indices.ref()},
                             {gx.ref()}, static_cast<double>(N * K), N, E, K));
          return std::vector<Tensor>{gx};
        }});
  }
  return out;
}

Value route_norm(ExecContext& c, Value s, const std::string& name) {
  Backend& b = c.backend();
  const int64_t K = last_dim(s.t), N = s.t.numel() / K;
  Tensor y = c.empty(s.t.meta(), MemCategory::kActivation, name);
  Tensor denom = c.empty({s.t.dtype(), {N, 1}}, MemCategory::kActivation, name + " denominator");
  c.launch(
      router_op(OpKind::kRouteNorm, name, {s.t.ref()}, {y.ref(), denom.ref()}, 3 * el(y), N, K, K));
  Value out = result(c, y, s.requires_grad());
  if (c.recording() && s.requires_grad()) {
    Tensor ss = s.t;
    c.record(Node{name, {s.id}, {out.id}, [&b, ss, denom, N, K, name](std::vector<Tensor>& g) {
                    Tensor gs = grad_like(b, ss, name + " grad_input");
                    b.launch(kCompute, router_op(OpKind::kRouteNormBackward, name + " backward",
                                                 {g[0].ref(), ss.ref(), denom.ref()}, {gs.ref()},
                                                 5 * el(ss), N, K, K));
                    return std::vector<Tensor>{gs};
                  }});
  }
  return out;
}

Value scale(ExecContext& c, Value s, double factor, const std::string& name) {
  Backend& b = c.backend();
  Tensor y = c.empty(s.t.meta(), MemCategory::kActivation, name);
  c.launch(make_op(OpKind::kScale, name, {s.t.ref()}, {y.ref()}, el(y), ScalarArgs{factor}));
  Value out = result(c, y, s.requires_grad());
  if (c.recording() && s.requires_grad()) {
    c.record(Node{name, {s.id}, {out.id}, [&b, factor, name](std::vector<Tensor>& g) {
                    Tensor gs = grad_like(b, g[0], name + " grad_input");
                    OpCall bop = make_op(OpKind::kScale, name + " backward", {g[0].ref()},
                                         {gs.ref()}, el(gs), ScalarArgs{factor});
                    b.launch(kCompute, bop);
                    return std::vector<Tensor>{gs};
                  }});
  }
  return out;
}

Tensor histogram(ExecContext& c, const Tensor& indices, int64_t experts, const std::string& name) {
  const int64_t K = last_dim(indices), N = indices.numel() / K;
  Tensor counts = c.empty({DType::kFloat32, {experts}}, MemCategory::kActivation, name);
  c.launch(router_op(OpKind::kHistogram, name, {indices.ref()}, {counts.ref()}, el(indices), N,
                     experts, K));
  return counts;
}

Tensor drop_over_capacity(ExecContext& c, const Tensor& scores, const Tensor& indices,
                          int64_t experts, int64_t capacity, MoeDropPolicy policy,
                          const std::string& name) {
  const int64_t K = last_dim(indices), N = indices.numel() / K;
  Tensor kept = c.empty(indices.meta(), MemCategory::kActivation, name);
  OpCall op = make_op(OpKind::kExpertCapacity, name, {scores.ref(), indices.ref()}, {kept.ref()},
                      static_cast<double>(N * K));
  CapacityArgs{N, experts, K, capacity, policy == MoeDropPolicy::kPosition ? 1 : 0}.encode(op);
  c.launch(op);
  return kept;
}

Tensor argsort(ExecContext& c, const Tensor& indices, const std::string& name) {
  const int64_t n = indices.numel();
  Tensor order = c.empty({DType::kInt64, {n}}, MemCategory::kActivation, name);
  c.launch(row_op(OpKind::kArgsort, name, {indices.ref()}, {order.ref()}, n, 1));
  return order;
}

Tensor floor_divide(ExecContext& c, const Tensor& indices, int64_t divisor,
                    const std::string& name) {
  const int64_t n = indices.numel();
  Tensor q = c.empty({DType::kInt64, {n}}, MemCategory::kActivation, name);
  c.launch(row_op(OpKind::kFloorDivide, name, {indices.ref()}, {q.ref()}, n, 1, divisor));
  return q;
}

Value gather_rows(ExecContext& c, Value x, const Tensor& index, const std::string& name) {
  Backend& b = c.backend();
  const int64_t W = last_dim(x.t), R = x.t.numel() / W, M = index.numel();
  Tensor y = c.empty({x.t.dtype(), {M, W}}, MemCategory::kActivation, name);
  c.launch(row_op(OpKind::kGatherRows, name, {x.t.ref(), index.ref()}, {y.ref()}, R, W));
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    const TensorMeta x_meta = x.t.meta();
    c.record(Node{name, {x.id}, {out.id}, [&b, index, x_meta, R, W, name](std::vector<Tensor>& g) {
                    Tensor gx = empty_tensor(b, x_meta, MemCategory::kTemporary, kCompute,
                                              name + " grad_input");
                    b.launch(kCompute, row_op(OpKind::kIndexAddRows, name + " backward",
                                              {g[0].ref(), index.ref()}, {gx.ref()}, R, W));
                    return std::vector<Tensor>{gx};
                  }});
  }
  return out;
}

Value scatter_rows(ExecContext& c, Value src, const Tensor& index, int64_t rows,
                   const std::string& name) {
  Backend& b = c.backend();
  const int64_t W = last_dim(src.t);
  Tensor y = c.empty({src.t.dtype(), {rows, W}}, MemCategory::kActivation, name);
  c.launch(row_op(OpKind::kScatterRows, name, {src.t.ref(), index.ref()}, {y.ref()}, rows, W));
  Value out = result(c, y, src.requires_grad());
  if (c.recording() && src.requires_grad()) {
    const TensorMeta src_meta = src.t.meta();
    c.record(Node{
        name, {src.id}, {out.id}, [&b, index, src_meta, rows, W, name](std::vector<Tensor>& g) {
          Tensor gs =
              empty_tensor(b, src_meta, MemCategory::kTemporary, kCompute, name + " grad_input");
          b.launch(kCompute, row_op(OpKind::kGatherRows, name + " backward",
                                    {g[0].ref(), index.ref()}, {gs.ref()}, rows, W));
          return std::vector<Tensor>{gs};
        }});
  }
  return out;
}

Value pad_row(ExecContext& c, Value x, const std::string& name) {
  const int64_t W = last_dim(x.t), R = x.t.numel() / W;
  Tensor y = c.empty({x.t.dtype(), {R + 1, W}}, MemCategory::kActivation, name);
  c.launch(row_op(OpKind::kPadRow, name, {x.t.ref()}, {y.ref()}, R, W));
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    const TensorMeta x_meta = x.t.meta();
    // CatBackward0: the gradient of x is a narrow view of the incoming one (no allocation).
    c.record(Node{name, {x.id}, {out.id}, [x_meta](std::vector<Tensor>& g) {
                    return std::vector<Tensor>{g[0] ? g[0].view(x_meta) : Tensor{}};
                  }});
  }
  return out;
}

Value slice_rows(ExecContext& c, Value x, int64_t rows, const std::string& name) {
  Backend& b = c.backend();
  const int64_t W = last_dim(x.t);
  Value out{x.t.view({x.t.dtype(), {rows, W}}), 0};
  out = result(c, out.t, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    const TensorMeta x_meta = x.t.meta();
    c.record(Node{name, {x.id}, {out.id}, [&b, x_meta, rows, W, name](std::vector<Tensor>& g) {
                    // grad.new_zeros(x.sizes()).slice(0, 0, rows).copy_(grad): the rows past `rows` 0.
                    Tensor gx = empty_tensor(b, x_meta, MemCategory::kTemporary, kCompute,
                                              name + " grad_input");
                    b.launch(kCompute, row_op(OpKind::kPadRow, name + " backward", {g[0].ref()},
                                              {gx.ref()}, rows, W));
                    return std::vector<Tensor>{gx};
                  }});
  }
  return out;
}

Permutation permute_indices(ExecContext& c, const Tensor& tokens_per_expert, int64_t routed_tokens,
                            int64_t experts, int64_t align, const std::string& name) {
  const PermuteIndicesArgs a{routed_tokens, experts, align};
  Permutation p;
  p.indices = c.empty({DType::kInt64, {a.padded_rows()}}, MemCategory::kActivation, name);
  p.offsets = c.empty({DType::kInt64, {experts}}, MemCategory::kActivation, name + " offsets");
  OpCall op = make_op(OpKind::kPermuteIndices, name, {tokens_per_expert.ref()},
                      {p.indices.ref(), p.offsets.ref()}, static_cast<double>(a.padded_rows()));
  a.encode(op);
  c.launch(op);
  return p;
}

Value grouped_mm(ExecContext& c, Value x, const Param& weight, const Tensor& offsets,
                 int64_t computed_rows, const std::string& name) {
  Backend& b = c.backend();
  Tensor w = detail::param_tensor(weight);
  FULLSHARD_CHECK(weight.shape.size() == 3, name + ": grouped weights are [experts, n, k]");
  const int64_t E = weight.shape[0], N = weight.shape[1], K = weight.shape[2];
  FULLSHARD_CHECK(last_dim(x.t) == K, name + ": input features do not match the weight");
  const int64_t P = x.t.numel() / K;
  const GroupedMmArgs args{P, K, N, E, computed_rows};
  const double flops = 2.0 * static_cast<double>(computed_rows) * K * N;
  Tensor y = c.empty({w.dtype(), {P, N}}, MemCategory::kActivation, name);
  OpCall op =
      make_op(OpKind::kGroupedMM, name, {x.t.ref(), w.ref(), offsets.ref()}, {y.ref()}, flops);
  args.encode(op);
  c.launch(op);
  Value out = result(c, y, true);
  if (!c.recording()) return out;
  const Param* pw = &weight;
  Tensor xs = x.t;
  c.record(Node{
      name,
      {x.id},
      {out.id},
      [&b, pw, xs, offsets, args, flops, name, need = x.requires_grad()](std::vector<Tensor>& g) {
        Tensor gx;
        const Tensor wt = pw->binding->unsharded();
        if (need && input_gradients_wanted()) {
          gx = grad_like(b, xs, name + " grad_input");
          OpCall bi = make_op(OpKind::kGroupedMMBackwardInput, name + " backward_input",
                              {g[0].ref(), wt.ref(), offsets.ref()}, {gx.ref()}, flops);
          args.encode(bi);
          b.launch(kCompute, bi);
        }
        // The weight part: deferred to W under a zero-bubble schedule (NOTE [Split backward] in
        // autograd.h), as torchtitan's _override_torch_ops_for_zero_bubble splits _grouped_mm
        // (GroupedMmSeparateMat2Grad keeps the input and offs until the weight gradient).
        weight_gradients(pw, {g[0]}, [&b, pw, xs, offsets, args, flops, name](
                                         const std::vector<Tensor>& go) {
          Tensor gw = detail::new_param_grad(b, *pw);
          OpCall bw = make_op(OpKind::kGroupedMMBackwardWeight, name + " backward_weight",
                              {go[0].ref(), xs.ref(), offsets.ref()}, {gw.ref()}, flops);
          args.encode(bw);
          b.launch(kCompute, bw);
          pw->binding->accumulate_grad(b, std::move(gw));
        });
        return std::vector<Tensor>{gx};
      }});
  return out;
}

Value weighted_sum(ExecContext& c, Value w, Value y, const std::string& name) {
  Backend& b = c.backend();
  const int64_t K = last_dim(w.t), N = w.t.numel() / K, D = y.t.numel() / (N * K);
  Tensor o = c.empty({y.t.dtype(), {N, D}}, MemCategory::kActivation, name);
  c.launch(router_op(OpKind::kWeightedSum, name, {w.t.ref(), y.t.ref()}, {o.ref()}, 2.0 * el(y.t),
                     N, K, K));
  const bool rg = w.requires_grad() || y.requires_grad();
  Value out = result(c, o, rg);
  if (c.recording() && rg) {
    Tensor ws = w.t, ys = y.t;
    c.record(Node{name, {w.id, y.id}, {out.id}, [&b, ws, ys, N, K, name](std::vector<Tensor>& g) {
                    Tensor gw = grad_like(b, ws, name + " grad_w");
                    Tensor gy = grad_like(b, ys, name + " grad_y");
                    b.launch(kCompute, router_op(OpKind::kWeightedSumBackward, name + " backward",
                                                 {g[0].ref(), ws.ref(), ys.ref()},
                                                 {gw.ref(), gy.ref()}, 4.0 * el(ys), N, K, K));
                    return std::vector<Tensor>{gw, gy};
                  }});
  }
  return out;
}

}  // namespace fullshard::ops::moe
