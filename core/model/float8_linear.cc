// torchao's Float8Linear op by op (core/model/float8_linear.h).
#include "core/model/float8_linear.h"

#include "core/model/op_util.h"
#include "core/model/ops.h"
#include "core/runtime/float8_args.h"
#include "core/runtime/layer_args.h"

// NOTE [Float8 casts]: hp_tensor_to_float8_dynamic (torchao/float8/float8_scaling_utils.py at
// pytorch/ao@36027d8), as torch 2.11 + torchao dispatch it in eager (tools/oracle/
// float8_linear_ops.py lists the aten ops): tensor_to_amax is abs (a full-size temporary in x's
// dtype) then max / amax(dim) (one value, or one per row or column, in x's dtype);
// amax_to_scale is five small kernels (.to(float64), clamp(min=1e-12), reciprocal, * fp8 max,
// .to(float32)) and three more with round_scales_to_power_of_2 (log2, floor, exp2); the cast is
// x.to(float32) (no kernel when x is fp32), * scale, clamp(-max, max) and .to(float8), each a
// new tensor, the previous freed once the next exists. Here the scale's kernels run in place on
// one fp32 tensor (eager allocates each; at most 8 bytes per row). Compiled (the block under
// torch.compile, as torchtitan runs float8), inductor fuses the cast: one amax kernel reading x,
// one kernel reading x and the amax that writes the float8 data and the scale. What each
// kernel reads and writes is its bytes; the amax and the cast count 1 FLOP per element each.
// The casts live as torchao's Python locals live: forward's until the output exists, backward's
// until the node returns.

namespace fullshard::ops {
using namespace detail;  // NOLINT: make_op, result, ...

namespace {

OpCall float8_op(OpKind kind, const std::string& name, std::vector<TensorRef> in,
                 std::vector<TensorRef> out, double flops, const Float8CastArgs& a) {
  OpCall op = make_op(kind, name, std::move(in), std::move(out), flops);
  a.encode(op);
  return op;
}

}  // namespace

Float8Cast cast_to_float8(Backend& b, StreamRole stream, const Tensor& x, int64_t rows,
                          int64_t cols, const Float8CastSpec& spec, bool compiled,
                          const Tensor* precomputed, const ProcessGroup* amax_group,
                          MemCategory cat, const std::string& name) {
  FULLSHARD_CHECK(x.numel() == rows * cols, name + ": float8 cast of a tensor of another size");
  Float8CastArgs a;
  a.granularity = spec.axiswise ? 1 : 0;
  a.axis = spec.axis;
  a.rows = rows;
  a.cols = cols;
  a.target = spec.target == DType::kFloat8E5M2 ? 1 : 0;
  a.pow2 = spec.pow2 ? 1 : 0;
  const int64_t s = a.scale_numel();
  const double n = static_cast<double>(rows * cols);
  const TensorMeta fp8{spec.target, {rows, cols}};
  const TensorMeta f32{DType::kFloat32, {rows, cols}};
  auto tmp = [&](TensorMeta m, const std::string& what) {
    return empty_tensor(b, std::move(m), MemCategory::kTemporary, stream, name + what);
  };
  Float8Cast out;
  Tensor amax;
  if (!precomputed) {
    if (compiled) {
      amax = tmp({DType::kFloat32, {s}}, " amax");
      b.launch(stream,
               float8_op(OpKind::kFloat8Amax, name + " amax", {x.ref()}, {amax.ref()}, n, a));
    } else {
      Tensor abs = tmp(x.meta(), " abs");
      b.launch(stream, float8_op(OpKind::kFloat8Abs, name + " abs", {x.ref()}, {abs.ref()}, n, a));
      amax = tmp({x.dtype(), {s}}, " amax");
      b.launch(stream,
               float8_op(OpKind::kFloat8Amax, name + " amax", {abs.ref()}, {amax.ref()}, n, a));
    }
    if (amax_group) {  // funcol all_reduce(amax, "MAX", pg): a copy, then the collective
      Tensor reduced = tmp(amax.meta(), " amax all_reduce");
      ops::copy_into(b, stream, reduced, amax, name + " amax copy");
      CollectiveCall call;
      call.kind = CollectiveKind::kAllReduce;
      call.op = ReduceOp::kMax;
      call.name = name + " amax all_reduce";
      call.input = reduced.ref();
      call.output = reduced.ref();
      b.collective(stream, call, *amax_group);
      amax = reduced;
    }
  }
  if (compiled && !precomputed) {
    out.data = empty_tensor(b, fp8, cat, stream, name + " float8");
    out.scale = empty_tensor(b, {DType::kFloat32, {s}}, cat, stream, name + " scale");
    a.step = 0;
    b.launch(stream, float8_op(OpKind::kFloat8Cast, name + " cast", {x.ref(), amax.ref()},
                               {out.data.ref(), out.scale.ref()}, n, a));
    return out;
  }
  if (precomputed) {
    out.scale = *precomputed;
  } else {
    out.scale = empty_tensor(b, {DType::kFloat32, {s}}, cat, stream, name + " scale");
    const int steps = spec.pow2 ? 8 : 5;
    for (int k = 1; k <= steps; ++k) {
      a.step = k;
      const Tensor& in = k == 1 ? amax : out.scale;
      b.launch(stream, float8_op(OpKind::kFloat8Scale, name + " scale", {in.ref()},
                                 {out.scale.ref()}, static_cast<double>(s), a));
    }
    amax = Tensor();
  }
  Tensor cur = x;
  if (x.dtype() != DType::kFloat32) {
    Tensor x32 = tmp(f32, " to_fp32");
    a.step = 1;
    b.launch(stream,
             float8_op(OpKind::kFloat8Cast, name + " to_fp32", {x.ref()}, {x32.ref()}, n, a));
    cur = x32;
  }
  Tensor scaled = tmp(f32, " scaled");
  a.step = 2;
  b.launch(stream, float8_op(OpKind::kFloat8Cast, name + " mul", {cur.ref(), out.scale.ref()},
                             {scaled.ref()}, n, a));
  cur = scaled;
  scaled = Tensor();
  Tensor clamped = tmp(f32, " clamp");
  a.step = 3;
  b.launch(stream,
           float8_op(OpKind::kFloat8Cast, name + " clamp", {cur.ref()}, {clamped.ref()}, 2 * n, a));
  cur = clamped;
  clamped = Tensor();
  out.data = empty_tensor(b, fp8, cat, stream, name + " float8");
  a.step = 4;
  b.launch(stream, float8_op(OpKind::kFloat8Cast, name + " to_float8", {cur.ref()},
                             {out.data.ref()}, n, a));
  return out;
}

namespace {

OpCall scaled_mm(OpKind kind, const std::string& name, const Float8Cast& p, const Float8Cast& q,
                 const Tensor& out, int64_t M, int64_t K, int64_t N) {
  OpCall op = make_op(kind, name, {p.data.ref(), q.data.ref(), p.scale.ref(), q.scale.ref()},
                      {out.ref()}, 2.0 * M * K * N);
  ScaledMmArgs{M, K, N}.encode(op);
  return op;
}

// The recipe's cast of each operand for each product (torchao Float8LinearConfig.
// from_recipe_name): input / weight / grad_output for output, grad_input and grad_weight.
struct RecipeCasts {
  Float8CastSpec x_out, w_out, g_gi, w_gi, g_gw, x_gw;
  bool grad_weight_hp = false;  // rowwise_with_gw_hp: grad_weight = g^T x in high precision
};

RecipeCasts recipe_casts(Float8Recipe r) {
  RecipeCasts c;
  if (r == Float8Recipe::kTensorwise) {
    c.g_gi.target = c.g_gw.target = DType::kFloat8E5M2;
    return c;
  }
  // The rowwise recipes: e4m3 everywhere, power-of-two scales. The axis is the one each
  // product reduces over: x and g per row for output / grad_input, per column for grad_weight;
  // the weight (as W [N, K]) per row for output, per column for grad_input.
  Float8CastSpec row{DType::kFloat8E4M3FN, true, -1, true};
  Float8CastSpec col{DType::kFloat8E4M3FN, true, 0, true};
  c.x_out = row;
  c.w_out = row;
  c.g_gi = row;
  c.w_gi = col;
  c.g_gw = col;
  c.x_gw = col;
  if (r == Float8Recipe::kRowwiseWithGwHp) {
    c.w_gi = Float8CastSpec{DType::kFloat8E4M3FN, false, -1, true};
    c.grad_weight_hp = true;
  }
  return c;
}

}  // namespace

Value float8_linear(ExecContext& c, Value x, const Param& weight, const std::string& name) {
  Backend& b = c.backend();
  FULLSHARD_CHECK(weight.float8 != Float8Recipe::kNone, name + " is not a float8 linear");
  Tensor w = param_tensor(weight);
  const int64_t K = weight.shape[1], N = weight.shape[0];
  FULLSHARD_CHECK(x.t.shape().back() == K, name + ": input features do not match the weight");
  const int64_t M = x.t.numel() / K;
  const bool compiled = weight.float8_compiled;
  const RecipeCasts rc = recipe_casts(weight.float8);
  // With FSDP2's float8 all-gather the unsharded weight is already float8 (tensorwise, its
  // scale from fsdp_pre_all_gather): tensor_already_casted_to_fp8 skips its casts.
  const bool w_fp8 = is_float8(w.dtype());
  const MemCategory tmp = MemCategory::kTemporary;
  Shape s = x.t.shape();
  s.back() = N;
  const DType out_dtype = w_fp8 ? weight.binding->compute_dtype() : w.dtype();
  Tensor y;
  {
    Float8Cast x8 = cast_to_float8(b, kCompute, x.t, M, K, rc.x_out, compiled, nullptr, nullptr,
                                   tmp, name + " input");
    Float8Cast w8 = w_fp8 ? Float8Cast{w, weight.binding->float8_scale()}
                          : cast_to_float8(b, kCompute, w, N, K, rc.w_out, compiled, nullptr,
                                           nullptr, tmp, name + " weight");
    y = c.empty({out_dtype, s}, MemCategory::kActivation, name);
    c.launch(scaled_mm(OpKind::kScaledMM, name + " scaled_mm", x8, w8, y, M, K, N));
  }
  Value out = result(c, y, true);
  if (!c.recording()) return out;
  const Param* pw = &weight;
  Tensor xs = x.t;  // ctx.save_for_backward(input_hp, weight_hp_t)
  c.record(Node{
      name,
      {x.id},
      {out.id},
      [&b, pw, xs, M, K, N, compiled, rc, name, need = x.requires_grad()](std::vector<Tensor>& g) {
        Tensor wt = pw->binding->unsharded();
        const bool w_fp8 = is_float8(wt.dtype());
        const Tensor& go = g[0];
        std::vector<Float8Cast> held;  // backward's locals, freed when it returns
        Tensor gx;
        held.push_back(cast_to_float8(b, kCompute, go, M, N, rc.g_gi, compiled, nullptr, nullptr,
                                      MemCategory::kTemporary, name + " grad_output"));
        if (need) {
          held.push_back(w_fp8 ? Float8Cast{wt, pw->binding->float8_scale()}
                               : cast_to_float8(b, kCompute, wt, N, K, rc.w_gi, compiled, nullptr,
                                                nullptr, MemCategory::kTemporary,
                                                name + " weight (grad_input)"));
          gx = grad_like(b, xs, name + " grad_input");
          b.launch(kCompute,
                   scaled_mm(OpKind::kScaledMMBackwardInput, name + " scaled_mm backward_input",
                             held[0], held.back(), gx, M, K, N));
        }
        Tensor gw = new_param_grad(b, *pw);
        if (rc.grad_weight_hp) {
          b.launch(kCompute,
                   make_op(OpKind::kLinearBackwardWeight, name + " backward_weight",
                           {go.ref(), xs.ref()}, {gw.ref()}, 2.0 * M * K * N, LinearArgs{M, K, N}));
        } else {
          // Tensorwise compiled: inductor reuses grad_output's cast (the same scale); eager
          // casts it again, as the rowwise recipes must (another axis).
          const bool reuse = compiled && !rc.g_gw.axiswise;
          if (!reuse)
            held.push_back(cast_to_float8(b, kCompute, go, M, N, rc.g_gw, compiled, nullptr,
                                          nullptr, MemCategory::kTemporary,
                                          name + " grad_output (grad_weight)"));
          const Float8Cast gw8 = reuse ? held[0] : held.back();
          held.push_back(cast_to_float8(b, kCompute, xs, M, K, rc.x_gw, compiled, nullptr, nullptr,
                                        MemCategory::kTemporary, name + " input (grad_weight)"));
          b.launch(kCompute,
                   scaled_mm(OpKind::kScaledMMBackwardWeight, name + " scaled_mm backward_weight",
                             gw8, held.back(), gw, M, K, N));
        }
        pw->binding->accumulate_grad(b, std::move(gw));
        return std::vector<Tensor>{gx};
      }});
  return out;
}

}  // namespace fullshard::ops

namespace fullshard {

int convert_to_float8_training(Module& root, const Float8Training& f, bool compile_blocks,
                               bool float8_all_gather) {
  if (!f.enabled()) return 0;
  int converted = 0;
  root.for_each_module([&](Module& m) {
    if (m.kind != "Linear") return;
    for (Param& p : m.params) {
      if (p.fqn != m.fqn + ".weight") continue;
      const Shape full = p.global_shape();
      if (full.size() != 2 || !float8_converts(f, m.fqn, full[0], full[1])) continue;
      p.float8 = f.recipe;
      p.float8_compiled = compile_blocks && m.fqn.rfind("layers.", 0) == 0;
      p.float8_all_gather = float8_all_gather;
      ++converted;
    }
  });
  return converted;
}

}  // namespace fullshard
