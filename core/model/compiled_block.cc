// model.implementation compile = true: the fused pointwise regions of a compiled Llama block.
#include "core/model/compiled_block.h"

#include "core/model/op_util.h"
#include "core/runtime/rope_args.h"
#include "core/runtime/norm_args.h"

// NOTE [Compiled block]: what torch.compile(block, fullgraph=True) runs for torchtitan's Llama
// TransformerBlock, as tools/measure/compiled_block.py measured it (method, output and the graph op
// by op: docs/ops.md, "Compiled block"). The GEMMs and SDPA stay eager; the pointwise work is five
// fused regions, in forward order: K0 attention_norm (x, w -> xn, fp32 rstd); K1 RoPE of q and k in
// one kernel, in place over the mm outputs; K2 ffn_norm of h = x + a (h is never stored); K3
// silu(g1) * g3 -> p; K4 x + a + f, written over f. Saved for backward: the partitioner's forward
// outputs x, rstd, xn, q, k, v, out, logsumexp, a, rstd2, hn, g1, g3, p.
// Backward: silu * mul's backward, each norm's with the residual gradient added in, one RoPE
// backward per tensor. Inductor's reordering and summing of the GEMMs are not modelled: a block's
// backward kernel count and transient peak are approximations; the forward and the saved tensors
// are as measured.
// Under op-level selective checkpointing the RoPE and the last add write new tensors instead of
// their inputs (the SAC cache may hold those inputs).

namespace fullshard::ops::compiled {
using namespace detail;  // NOLINT: make_op, result, ...

namespace {

Tensor norm_backward(Backend& b, const Param& w, const Tensor& g_y, const Tensor& x,
                     const Tensor* a, const Tensor& rstd, const Tensor& g_res,
                     const std::string& name) {
  Tensor gx = empty_tensor(b, x.meta(), MemCategory::kTemporary, kCompute, name + " grad_input");
  Tensor gw = new_param_grad(b, w);
  std::vector<TensorRef> in = {g_y.ref(), x.ref(), rstd.ref(), w.binding->unsharded().ref()};
  if (a) in.push_back(a->ref());
  if (g_res) in.push_back(g_res.ref());
  // FLOPs: the fused kernel's 8 per element, + 1 for x + a, + 1 for the residual gradient.
  const double per = 8.0 + (a ? 1 : 0) + (g_res ? 1 : 0);
  b.launch(kCompute, make_op(OpKind::kCompiledRMSNormBackward, name + " backward", std::move(in),
                             {gx.ref(), gw.ref()}, per * el(x),
                             CompiledNormBackwardArgs{.has_a = a != nullptr,
                                                      .has_g_h = static_cast<bool>(g_res)}));
  w.binding->accumulate_grad(b, std::move(gw));
  return gx;
}

}  // namespace

RegionOut rms_norm(ExecContext& c, Value x, const Param& weight, double eps,
                   const std::string& name) {
  Backend& b = c.backend();
  Tensor w = param_tensor(weight);
  const int64_t rows = x.t.numel() / x.t.shape().back();
  Tensor y = c.empty(x.t.meta(), MemCategory::kActivation, name);
  Tensor rstd = c.empty({DType::kFloat32, {rows}}, MemCategory::kActivation, name + " rstd");
  OpCall op = make_op(OpKind::kCompiledRMSNorm, name, {x.t.ref(), w.ref()}, {y.ref(), rstd.ref()},
                      4 * el(x.t), NormArgs{.eps = eps});
  c.launch(op);
  RegionOut r{result(c, y, true), result(c, x.t, x.requires_grad())};
  if (c.recording()) {
    const Param* pw = &weight;
    Tensor xs = x.t;
    c.record(Node{
        name, {x.id}, {r.y.id, r.residual.id}, [&b, pw, xs, rstd, name](std::vector<Tensor>& g) {
          if (!g[0]) return std::vector<Tensor>{g[1]};
          return std::vector<Tensor>{norm_backward(b, *pw, g[0], xs, nullptr, rstd, g[1], name)};
        }});
  }
  return r;
}

RegionOut add_rms_norm(ExecContext& c, Value x, Value a, const Param& weight, double eps,
                       const std::string& name) {
  Backend& b = c.backend();
  Tensor w = param_tensor(weight);
  FULLSHARD_CHECK(x.t.numel() == a.t.numel(), name + ": x and a differ in size");
  const int64_t rows = x.t.numel() / x.t.shape().back();
  Tensor y = c.empty(x.t.meta(), MemCategory::kActivation, name);
  Tensor rstd = c.empty({DType::kFloat32, {rows}}, MemCategory::kActivation, name + " rstd");
  OpCall op = make_op(OpKind::kCompiledAddRMSNorm, name, {x.t.ref(), a.t.ref(), w.ref()},
                      {y.ref(), rstd.ref()}, 5 * el(x.t), NormArgs{.eps = eps});
  c.launch(op);
  RegionOut r{result(c, y, true), result(c, a.t, x.requires_grad() || a.requires_grad())};
  if (c.recording()) {
    const Param* pw = &weight;
    Tensor xs = x.t, as = a.t;
    c.record(Node{name,
                  {x.id, a.id},
                  {r.y.id, r.residual.id},
                  [&b, pw, xs, as, rstd, name](std::vector<Tensor>& g) {
                    // d(x + a) = the norm's input gradient + h's own (the last residual add's).
                    Tensor gh =
                        g[0] ? norm_backward(b, *pw, g[0], xs, &as, rstd, g[1], name) : g[1];
                    return std::vector<Tensor>{gh, gh};
                  }});
  }
  return r;
}

std::pair<Value, Value> rope(ExecContext& c, Value q, Value k, int64_t head_dim,
                             const RopeParams& freqs, bool adjacent, const std::string& name) {
  Backend& b = c.backend();
  // In place (inductor reuses the mm outputs), except where the SAC cache may hold them.
  const bool in_place = c.sac() == nullptr;
  Tensor qo = in_place ? q.t : c.empty(q.t.meta(), MemCategory::kActivation, name + " q");
  Tensor ko = in_place ? k.t : c.empty(k.t.meta(), MemCategory::kActivation, name + " k");
  CompiledRopeArgs args;  // core/runtime/rope_args.h
  args.head_dim = head_dim;
  args.adjacent = adjacent;
  args.rope = freqs;
  OpCall op = make_op(OpKind::kCompiledRoPE, name, {q.t.ref(), k.t.ref()}, {qo.ref(), ko.ref()},
                      6 * (el(q.t) + el(k.t)));
  args.encode(op);
  c.launch(op);
  Value qv = result(c, qo, q.requires_grad()), kv = result(c, ko, k.requires_grad());
  if (c.recording() && (q.requires_grad() || k.requires_grad())) {
    TensorMeta qm = q.t.meta(), km = k.t.meta();
    c.record(
        Node{name, {q.id, k.id}, {qv.id, kv.id}, [&b, qm, km, args, name](std::vector<Tensor>& g) {
               std::vector<Tensor> out(2);
               const TensorMeta* metas[2] = {&qm, &km};
               const char* which[2] = {" q", " k"};
               for (int i = 1; i >= 0; --i) {  // k first, as the measured backward runs them
                 if (!g[i]) continue;
                 out[i] = empty_tensor(b, *metas[i], MemCategory::kTemporary, kCompute,
                                        name + which[i] + " grad_input");
                 OpCall bop = make_op(OpKind::kCompiledRoPEBackward, name + which[i] + " backward",
                                      {g[i].ref()}, {out[i].ref()}, 6 * el(out[i]));
                 args.encode(bop);
                 b.launch(kCompute, bop);
               }
               return out;
             }});
  }
  return {qv, kv};
}

Value silu_mul(ExecContext& c, Value a, Value bv, const std::string& name) {
  Backend& b = c.backend();
  Tensor y = c.empty(a.t.meta(), MemCategory::kActivation, name);
  c.launch(make_op(OpKind::kCompiledSiluMul, name, {a.t.ref(), bv.t.ref()}, {y.ref()}, 5 * el(y)));
  const bool rg = a.requires_grad() || bv.requires_grad();
  Value out = result(c, y, rg);
  if (c.recording() && rg) {
    Tensor as = a.t, bs = bv.t;
    c.record(Node{name, {a.id, bv.id}, {out.id}, [&b, as, bs, name](std::vector<Tensor>& g) {
                    Tensor ga = grad_like(b, as, name + " grad_a");
                    Tensor gb = grad_like(b, bs, name + " grad_b");
                    b.launch(kCompute, make_op(OpKind::kCompiledSiluMulBackward, name + " backward",
                                               {g[0].ref(), as.ref(), bs.ref()},
                                               {ga.ref(), gb.ref()}, 10 * el(ga)));
                    return std::vector<Tensor>{ga, gb};
                  }});
  }
  return out;
}

Value residual_add(ExecContext& c, Value h, const Tensor& x, const Tensor& a, Value f,
                   const std::string& name) {
  const bool in_place = c.sac() == nullptr;
  Tensor y = in_place ? f.t : c.empty(f.t.meta(), MemCategory::kActivation, name);
  c.launch(make_op(OpKind::kCompiledResidualAdd, name, {x.ref(), a.ref(), f.t.ref()}, {y.ref()},
                   2 * el(y)));
  const bool rg = h.requires_grad() || f.requires_grad();
  Value out = result(c, y, rg);
  if (c.recording() && rg)
    c.record(Node{name, {h.id, f.id}, {out.id}, [](std::vector<Tensor>& g) {
                    return std::vector<Tensor>{g[0], g[0]};
                  }});
  return out;
}

}  // namespace fullshard::ops::compiled
