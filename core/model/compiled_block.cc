// model.implementation compile = true: the fused pointwise regions of a compiled Llama block.
#include "core/model/compiled_block.h"

#include "core/model/op_util.h"
#include "core/runtime/rope_args.h"

// NOTE [Compiled block]: what torch.compile(block, fullgraph=True) runs for torchtitan's Llama
// TransformerBlock, measured with tools/measure/compiled_block.py (PyTorch 2.15 CPU, inductor;
// output in tools/measure/compiled_block.json: bf16 and fp32, complex and fused RoPE; the
// generated code was read with torch._inductor.utils.run_and_get_code). Forward, in order:
//   K0 attention_norm: reads x, w; writes xn (model dtype) and rstd (fp32 [rows])
//   mm wq, wk, wv (extern)
//   K1 RoPE of q and k, one kernel, written over the mm outputs (in place)
//   SDPA (extern; saves q, k, v, out, logsumexp as fullshard's flash model declares)
//   mm wo -> a
//   K2 ffn_norm of h = x + a: reads x, a, w; writes hn and rstd; h is NOT stored
//   mm w1 -> g1, mm w3 -> g3
//   K3 silu(g1) * g3 -> p
//   mm w2 -> f
//   K4 out = x + a + f, written over f
// The partitioner's forward outputs besides the block output (the saved tensors): x, rstd, xn,
// q, k, v (after RoPE), out, logsumexp, a (wo's output: h is recomputed from x + a), rstd2, hn,
// g1, g3, p, and the parameters and RoPE tables (free for FSDP: the unsharded parameters are
// all-gathered again for backward). Against eager it does not save silu(g1) (recomputed in the
// silu * mul backward) and saves a instead of h (same size): per token and block, 8 D + 8 + 6 F
// bytes in bf16 beside attention's, where eager saves 8 D + 8 + 8 F. Complex RoPE changes
// nothing saved (inductor does not code-generate complex ops and falls back to aten for the
// product, but both forms save nothing beyond the tables); on CPU the SDPA output is
// transposed by one extra copy before wo, which flash's [B, S, H, hd] output does not need on
// CUDA (fullshard's attention output already has that layout, as eager's).
// Backward: the measured graph fuses silu * mul's backward (one kernel, both grads), each
// norm's backward with the residual gradient added in (the ffn_norm one recomputing x + a),
// and one RoPE backward per tensor. fullshard records those regions as the block's autograd
// nodes run them; inductor also reorders the weight-gradient GEMMs to the end of the block's
// backward, and sums the three grad-input GEMMs of wq / wk / wv (and of w1 / w3) inside the
// norm's backward kernel, where fullshard's engine accumulates them with its own adds: the
// backward's kernel count and its transient peak inside one block are therefore approximations,
// the saved tensors and the forward are as measured.
// Under op-level selective checkpointing the RoPE and the last add write new tensors instead of
// their inputs (the SAC cache may hold those inputs).

namespace fullshard::ops::compiled {
using namespace detail;  // NOLINT: make_op, result, ...

namespace {

Tensor norm_backward(Backend& b, const Param& w, const Tensor& g_y, const Tensor& x,
                     const Tensor* a, const Tensor& rstd, const Tensor& g_res,
                     const std::string& name) {
  Tensor gx = Tensor::empty(b, x.meta(), MemCategory::kTemporary, kCompute, name + " grad_input");
  Tensor gw = new_param_grad(b, w);
  std::vector<TensorRef> in = {g_y.ref(), x.ref(), rstd.ref(), w.binding->unsharded().ref()};
  if (a) in.push_back(a->ref());
  if (g_res) in.push_back(g_res.ref());
  // FLOPs: the fused kernel's 8 per element, + 1 for x + a, + 1 for the residual gradient.
  const double per = 8.0 + (a ? 1 : 0) + (g_res ? 1 : 0);
  b.launch(kCompute, make_op(OpKind::kCompiledRMSNormBackward, name + " backward", std::move(in),
                             {gx.ref(), gw.ref()}, per * el(x), {a ? 1 : 0, g_res ? 1 : 0}));
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
                      4 * el(x.t));
  op.fargs = {eps};
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
                      {y.ref(), rstd.ref()}, 5 * el(x.t));
  op.fargs = {eps};
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
                 out[i] = Tensor::empty(b, *metas[i], MemCategory::kTemporary, kCompute,
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
