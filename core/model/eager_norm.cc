// rms_norm=eager: the chain of aten ops PyTorch eager runs, and autograd records, for
// torchtitan's 2024 RMSNorm and Hugging Face's LlamaRMSNorm.
#include "core/model/ops.h"
#include "core/model/op_util.h"
#include "core/runtime/eager_args.h"

// NOTE [Eager RMSNorm]: torchtitan's 2024 RMSNorm (torchtitan/models/norms.py @ pytorch/torchtitan
// 3f20451), self._norm(x.float()).type_as(x) * self.weight with _norm = x * rsqrt(x.pow(2).mean(-1,
// keepdim=True) + eps), and transformers' LlamaRMSNorm (the same chain): each op one kernel with
// its output allocated, and one autograd node saving what tools/autograd/derivatives.yaml says: pow
// saves self; mean only sizes; rsqrt its result; mul both operands; casts and + eps nothing (a cast
// to the dtype a tensor already has is no op at all). Backward kernels follow the same formulas,
// with a broadcast operand's gradient reduced after its full-size product (both alive at once).
// Saving the weight, an FSDP unsharded parameter, costs nothing (all-gathered again for backward),
// as for the fused kernel. Each rule in full: docs/ops.md, "Eager RMSNorm in full".

namespace fullshard::ops {
using namespace detail;  // NOLINT

Value to_dtype(ExecContext& c, Value x, DType dt, const std::string& name) {
  if (x.t.dtype() == dt) return x;
  Backend& b = c.backend();
  Tensor y = cast(b, kCompute, x.t, dt, MemCategory::kActivation, name);
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    TensorMeta meta = x.t.meta();
    c.record(Node{name, {x.id}, {out.id}, [&b, meta, name](std::vector<Tensor>& g) {
                    Tensor gx = empty_tensor(b, meta, MemCategory::kTemporary, kCompute,
                                              name + " backward");
                    copy_into(b, kCompute, gx, g[0], name + " backward");
                    return std::vector<Tensor>{gx};
                  }});
  }
  return out;
}

namespace {

Tensor pointwise(Backend& b, OpKind kind, const Tensor& x, double farg, const TensorMeta& meta,
                 MemCategory cat, const std::string& name) {
  Tensor y = empty_tensor(b, meta, cat, kCompute, name);
  b.launch(kCompute, make_op(kind, name, {x.ref()}, {y.ref()}, el(y), ScalarArgs{farg}));
  return y;
}

Tensor mul_same(Backend& b, const Tensor& x, const Tensor& y, const std::string& name) {
  Tensor o = grad_like(b, x, name);
  b.launch(kCompute, make_op(OpKind::kMul, name, {x.ref(), y.ref()}, {o.ref()}, el(o)));
  return o;
}

// a [rows, D] * b ([rows] per row, or [D] per column) -> a new tensor like `meta`.
Tensor mul_bcast(Backend& b, const Tensor& a, const Tensor& v, bool per_col, int64_t D,
                 const TensorMeta& meta, MemCategory cat, const std::string& name) {
  Tensor o = empty_tensor(b, meta, cat, kCompute, name);
  b.launch(kCompute, make_op(OpKind::kMulBroadcast, name, {a.ref(), v.ref()}, {o.ref()}, el(o),
                             MulBroadcastArgs{.mode = per_col ? MulBroadcastArgs::kPerColumn
                                                              : MulBroadcastArgs::kPerRow,
                                              .dim = D}));
  return o;
}

Value pow2(ExecContext& c, Value x, const std::string& name) {
  Backend& b = c.backend();
  Tensor y = pointwise(b, OpKind::kPowScalar, x.t, 2.0, x.t.meta(), MemCategory::kActivation, name);
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    Tensor xs = x.t;
    c.record(Node{name, {x.id}, {out.id}, [&b, xs, name](std::vector<Tensor>& g) {
                    Tensor p1 = pointwise(b, OpKind::kPowScalar, xs, 1.0, xs.meta(),
                                          MemCategory::kTemporary, name + " backward pow");
                    Tensor p2 = pointwise(b, OpKind::kScale, p1, 2.0, xs.meta(),
                                          MemCategory::kTemporary, name + " backward scale");
                    return std::vector<Tensor>{mul_same(b, g[0], p2, name + " backward mul")};
                  }});
  }
  return out;
}

Value mean_last_dim(ExecContext& c, Value x, const std::string& name) {
  Backend& b = c.backend();
  const int64_t D = x.t.shape().back();
  Shape s = x.t.shape();
  s.back() = 1;
  Tensor y = c.empty({x.t.dtype(), s}, MemCategory::kActivation, name);
  OpCall op = make_op(OpKind::kSumLastDim, name, {x.t.ref()}, {y.ref()}, el(x.t),
                      RowArgs{.dim = D, .scale = 1.0 / static_cast<double>(D), .has_scale = true});
  c.launch(op);
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    TensorMeta meta = x.t.meta();
    c.record(Node{
        name, {x.id}, {out.id}, [&b, meta, D, name](std::vector<Tensor>& g) {
          Tensor gx = empty_tensor(b, meta, MemCategory::kTemporary, kCompute, name + " backward");
          OpCall bop =
              make_op(OpKind::kExpandLastDim, name + " backward", {g[0].ref()}, {gx.ref()}, el(gx),
                      RowArgs{.dim = D, .scale = 1.0 / static_cast<double>(D), .has_scale = true});
          b.launch(kCompute, bop);
          return std::vector<Tensor>{gx};
        }});
  }
  return out;
}

Value add_eps(ExecContext& c, Value x, double eps, const std::string& name) {
  Tensor y = pointwise(c.backend(), OpKind::kAddScalar, x.t, eps, x.t.meta(),
                       MemCategory::kActivation, name);
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad())
    c.record(Node{
        name, {x.id}, {out.id}, [](std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; }});
  return out;
}

Value rsqrt(ExecContext& c, Value x, const std::string& name) {
  Backend& b = c.backend();
  Tensor y = pointwise(b, OpKind::kRsqrt, x.t, 0.0, x.t.meta(), MemCategory::kActivation, name);
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    c.record(Node{name, {x.id}, {out.id}, [&b, y, name](std::vector<Tensor>& g) {
                    Tensor t1 = pointwise(b, OpKind::kScale, g[0], -0.5, y.meta(),
                                          MemCategory::kTemporary, name + " backward scale");
                    Tensor t2 = pointwise(b, OpKind::kPowScalar, y, 3.0, y.meta(),
                                          MemCategory::kTemporary, name + " backward pow");
                    return std::vector<Tensor>{mul_same(b, t1, t2, name + " backward mul")};
                  }});
  }
  return out;
}

// x [rows, D] * r [rows, 1].
Value mul_rows(ExecContext& c, Value x, Value r, const std::string& name) {
  Backend& b = c.backend();
  const int64_t D = x.t.shape().back();
  Tensor y = mul_bcast(b, x.t, r.t, false, D, x.t.meta(), MemCategory::kActivation, name);
  const bool rg = x.requires_grad() || r.requires_grad();
  Value out = result(c, y, rg);
  if (c.recording() && rg) {
    Tensor xs = r.requires_grad() ? x.t : Tensor(), rs = x.requires_grad() ? r.t : Tensor();
    bool need_x = x.requires_grad(), need_r = r.requires_grad();
    TensorMeta rmeta = r.t.meta();
    c.record(Node{name,
                  {x.id, r.id},
                  {out.id},
                  [&b, xs, rs, rmeta, need_x, need_r, D, name](std::vector<Tensor>& g) {
                    Tensor gx, gr;
                    if (need_x)
                      gx = mul_bcast(b, g[0], rs, false, D, g[0].meta(), MemCategory::kTemporary,
                                     name + " grad_self");
                    if (need_r) {
                      Tensor full = mul_same(b, g[0], xs, name + " grad_other");
                      gr = empty_tensor(b, rmeta, MemCategory::kTemporary, kCompute,
                                         name + " grad_other sum_to_size");
                      OpCall op = make_op(OpKind::kSumLastDim, name + " grad_other sum_to_size",
                                          {full.ref()}, {gr.ref()}, el(full),
                                          RowArgs{.dim = D, .scale = 1.0, .has_scale = true});
                      b.launch(kCompute, op);
                    }
                    return std::vector<Tensor>{gx, gr};
                  }});
  }
  return out;
}

// x [rows, D] * weight [D].
Value mul_weight(ExecContext& c, Value x, const Param& weight, const std::string& name) {
  Backend& b = c.backend();
  Tensor w = param_tensor(weight);
  const int64_t D = x.t.shape().back();
  TensorMeta ym{x.t.dtype(), x.t.shape()};
  Tensor y = mul_bcast(b, x.t, w, true, D, ym, MemCategory::kActivation, name);
  Value out = result(c, y, x.requires_grad() || weight.requires_grad);
  if (out.requires_grad()) {
    const Param* pw = &weight;
    Tensor xs = weight.requires_grad ? x.t : Tensor();  // MulBackward0 saves self for other's grad
    c.record(Node{name,
                  {x.id},
                  {out.id},
                  [&b, pw, xs, D, name, need = x.requires_grad()](std::vector<Tensor>& g) {
                    Tensor gx;
                    if (need && input_gradients_wanted())
                      gx = mul_bcast(b, g[0], pw->binding->unsharded(), true, D, g[0].meta(),
                                     MemCategory::kTemporary, name + " grad_self");
                    if (pw->requires_grad)  // NOTE [Split backward] in autograd.h
                      weight_gradients(pw, {g[0]}, [&b, pw, xs, D, name](
                                                       const std::vector<Tensor>& go) {
                        Tensor gw;
                        {
                          Tensor full = mul_same(b, go[0], xs, name + " grad_other");
                          gw = new_param_grad(b, *pw);
                          b.launch(kCompute, make_op(OpKind::kSumLeadingDims,
                                                     name + " grad_other sum_to_size",
                                                     {full.ref()}, {gw.ref()}, el(full),
                                                     RowArgs{.dim = D}));
                        }
                        pw->binding->accumulate_grad(b, std::move(gw));
                      });
                    return std::vector<Tensor>{gx};
                  }});
  }
  return out;
}

}  // namespace

Value rms_norm_eager(ExecContext& c, Value x, const Param& weight, double eps,
                     const std::string& name) {
  const DType dt = x.t.dtype();
  Value xf = to_dtype(c, std::move(x), DType::kFloat32, name + " float");
  Value sq = pow2(c, xf, name + " pow");
  Value ms = mean_last_dim(c, std::move(sq), name + " mean");
  Value ve = add_eps(c, std::move(ms), eps, name + " add_eps");
  Value r = rsqrt(c, std::move(ve), name + " rsqrt");
  Value n = mul_rows(c, std::move(xf), std::move(r), name + " mul");
  Value nt = to_dtype(c, std::move(n), dt, name + " type_as");
  return mul_weight(c, std::move(nt), weight, name + " mul_weight");
}

}  // namespace fullshard::ops
