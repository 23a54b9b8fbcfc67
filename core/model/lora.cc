#include "core/model/lora.h"

#include <fnmatch.h>

#include <cmath>

#include "core/common/error.h"
#include "core/model/op_util.h"
#include "core/runtime/eager_args.h"
#include "core/model/ops.h"
#include "core/runtime/layer_args.h"
#include "core/runtime/nf4_args.h"

// NOTE [Frozen parameters]: a parameter with requires_grad=False (torchtune's and PEFT's frozen
// base, a script's `p.requires_grad_(False)`) gets no .grad, so FSDP2 (_fsdp_param_group.py,
// FSDPParamGroup.post_backward) leaves it out of fsdp_params_with_grad: no reduce-scatter of
// its part, and the optimizer (built over the trainable parameters) keeps no state for it. It
// still sits in its unit's FSDPParamGroup beside the trainable ones and is all-gathered with
// them in the one all-gather (_fsdp_collectives.py, foreach_all_gather): a frozen bf16 base
// under param_dtype bf16 has no cast (FSDPParam.init_dtype_attrs drops a param_dtype equal to
// the original dtype), so its sharded storage is its all-gather input as is, while fp32
// adapters are foreach-copied (cast) into a flat temporary (_get_param_all_gather_inputs).
// Autograd records a node only where some input requires grad, and saves only what the
// gradients it must produce need: a frozen linear's backward computes grad_input from the
// weight alone, so its input is not saved for it (mm's backward saves `self` only when `mat2`
// requires grad). The ops in ops.cc follow these rules (docs/ops.md).
//
// NOTE [Frozen norm weights]: the fused RMSNorm / LayerNorm backward kernels here write the
// weight's gradient together with grad_input; for a frozen weight that gradient goes into a
// temporary freed right after the kernel (one [D] tensor: PyTorch's output_mask skips it).
//
// NOTE [LoRA]: PEFT's LoraLayer (peft/tuners/lora/layer.py, Linear.forward) with dropout 0 runs
// result = base_layer(x); result = result + lora_B(lora_A(x)) * scaling, scaling = alpha / r.
// lora_A and lora_B are nn.Linear modules without bias: A [r, in] initialised by
// kaiming_uniform_(a=sqrt(5)) (U(-1/sqrt(in), 1/sqrt(in))), B [out, r] zeros, so the adapted
// model starts equal to the base. Each is an op here: linear, linear, the scalar mul, the add.
// lora_A's backward needs x (saved: it is the adapted linear's input), lora_B's needs A(x).

namespace fullshard {
namespace {

struct PeftName {
  const char* peft;
  const char* llama;
};
constexpr PeftName kPeftNames[] = {{"q_proj", "wq"},   {"k_proj", "wk"},    {"v_proj", "wv"},
                                   {"o_proj", "wo"},   {"gate_proj", "w1"}, {"up_proj", "w3"},
                                   {"down_proj", "w2"}};

}  // namespace

bool is_lora_adapter(const Param& p) {
  return p.fqn.find(".lora_A.") != std::string::npos || p.fqn.find(".lora_B.") != std::string::npos;
}

std::string lora_module_for(const std::string& peft_name) {
  for (const auto& n : kPeftNames)
    if (peft_name == n.peft) return n.llama;
  return "";
}

const std::vector<std::string>& lora_peft_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& n : kPeftNames) v.emplace_back(n.peft);
    return v;
  }();
  return names;
}

bool has_lora(const Module& linear) {
  const std::string a = linear.fqn + ".lora_A";
  for (const auto& ch : linear.children)
    if (ch->fqn == a) return true;
  return false;
}

void add_lora_adapters(Module& root, const LoraConfig& lora) {
  FULLSHARD_CHECK(lora.rank > 0, "add_lora_adapters without a rank");
  root.for_each_module([&](Module& m) {
    if (m.kind != "Linear" || m.params.empty()) return;
    const std::string short_name = m.fqn.substr(m.fqn.rfind('.') + 1);
    bool target = false;
    for (const std::string& t : lora.target_modules) target = target || t == short_name;
    if (!target || m.fqn.rfind("layers.", 0) != 0) return;
    const Shape w = m.param("weight").shape;  // [out, in]
    Module* a = m.add_child("lora_A", "Linear");
    Param& pa = a->add_param("weight", {lora.rank, w[1]});
    pa.init = ParamInit::kUniform;
    pa.init_bound = 1.0 / std::sqrt(static_cast<double>(w[1]));
    Module* b = m.add_child("lora_B", "Linear");
    b->add_param("weight", {w[0], lora.rank}).init = ParamInit::kZeros;
  });
}

bool fnmatch_fqn(const std::string& pattern, const std::string& fqn) {
  return ::fnmatch(pattern.c_str(), fqn.c_str(), 0) == 0;
}

void set_orig_dtype(Module& root, DType orig) {
  root.for_each_param([orig](Param& p) { p.dtype = orig; });
}

int freeze_parameters(Module& root, const std::vector<std::string>& patterns, bool lora,
                      DType frozen_dtype, const Nf4Config& nf4) {
  int n = 0;
  root.for_each_module([&](Module& m) {
    for (Param& p : m.params) {
      bool freeze = lora && !is_lora_adapter(p);
      for (const std::string& pat : patterns) freeze = freeze || fnmatch_fqn(pat, p.fqn);
      if (!freeze) continue;
      p.requires_grad = false;
      p.dtype = frozen_dtype;
      if (nf4.enabled && m.kind == "Linear" && p.shape.size() == 2 &&
          m.fqn.rfind("layers.", 0) == 0 && p.fqn.size() > 7 &&
          p.fqn.compare(p.fqn.size() - 7, 7, ".weight") == 0) {
        p.nf4_block_size = nf4.block_size;
        p.nf4_scaler_block_size = nf4.scaler_block_size;
      }
      ++n;
    }
  });
  return n;
}

namespace ops {
using namespace detail;  // NOLINT: make_op, result, el (op_util.h)

Value scale(ExecContext& c, Value x, double factor, const std::string& name) {
  Backend& b = c.backend();
  Tensor y = c.empty(x.t.meta(), MemCategory::kActivation, name);
  c.launch(make_op(OpKind::kScale, name, {x.t.ref()}, {y.ref()}, el(y), ScalarArgs{factor}));
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    c.record(Node{name, {x.id}, {out.id}, [&b, factor, name](std::vector<Tensor>& g) {
                    Tensor gx = grad_like(b, g[0], name + " grad");
                    b.launch(kCompute, make_op(OpKind::kScale, name + " backward", {g[0].ref()},
                                               {gx.ref()}, el(gx), ScalarArgs{factor}));
                    return std::vector<Tensor>{gx};
                  }});
  }
  return out;
}

Value lora_linear(ExecContext& c, Value x, Module& m, const Param* bias, double scaling,
                  const std::string& name) {
  Value base = ops::linear(c, x, m.param("weight"), bias, name);
  Value a =
      ops::linear(c, std::move(x), m.child("lora_A").param("weight"), nullptr, name + ".lora_A");
  Value bb =
      ops::linear(c, std::move(a), m.child("lora_B").param("weight"), nullptr, name + ".lora_B");
  Value s = scale(c, std::move(bb), scaling, name + ".lora_scaling");
  return add(c, std::move(base), std::move(s), name + ".lora_add");
}

// NOTE [NF4 linear]: torchao's F.linear on an NF4Tensor weight is LinearNF4 (nf4_tensor.py):
// forward F.linear(x, weight.to(x.dtype)), backward grad_output @ weight.to(grad.dtype), and
// ctx.save_for_backward(weight) saves the NF4Tensor itself (its parts are the all-gather
// outputs FSDP2 frees on reshard: no bytes of its own), not x (the weight never requires grad).
// weight.to(bf16) is get_original_weight: one kNF4Dequantize here into a bf16 [N, K] temporary
// freed after the matmul, in forward and again in backward. Eager torchao runs it as about ten
// aten ops (>> 4, & 0xF to int64 indices, two table lookups, two products, stack) whose
// intermediates are not modelled: this is the one fused kernel torch.compile would make of it
// (torchtune's QLoRA configs default to compile: False, so eager's transients are missing).
Tensor nf4_dequantize(Backend& b, const Param& w, const std::string& name) {
  const std::vector<Tensor> parts = w.binding->nf4_weight();
  FULLSHARD_CHECK(parts.size() == 5, "NF4 weight " + w.fqn + " used while sharded");
  Tensor out = empty_tensor(b, {DType::kBFloat16, w.shape}, MemCategory::kTemporary, kCompute,
                             name + " weight.to(bf16)");
  const int64_t n = fullshard::numel(w.shape);
  std::vector<TensorRef> in;
  for (const Tensor& t : parts) in.push_back(t.ref());
  // Per element: the table lookup and the product with its block's scaler (plus a division and
  // an add per block for the scaler); bytes: every part read once, the bf16 weight written.
  b.launch(kCompute, make_op(OpKind::kNF4Dequantize, name + " nf4 dequantize", in, {out.ref()},
                             2.0 * static_cast<double>(n),
                             Nf4Args{n, w.nf4_block_size, w.nf4_scaler_block_size, 1, 0}));
  return out;
}

Value nf4_linear(ExecContext& c, Value x, const Param& weight, const Param* bias,
                 const std::string& name) {
  FULLSHARD_CHECK(bias == nullptr && !weight.requires_grad && c.sac() == nullptr,
                  name + ": an NF4 linear with a bias, a gradient or op-level SAC (check_nf4)");
  Backend& b = c.backend();
  const int64_t K = weight.shape[1], N = weight.shape[0];
  FULLSHARD_CHECK(x.t.shape().back() == K, name + ": input features do not match the weight");
  const int64_t M = x.t.numel() / K;
  Shape s = x.t.shape();
  s.back() = N;
  Tensor y;
  {
    Tensor w = nf4_dequantize(b, weight, name);
    y = c.empty({w.dtype(), s}, MemCategory::kActivation, name);
    c.launch(make_op(OpKind::kLinear, name, {x.t.ref(), w.ref()}, {y.ref()}, 2.0 * M * K * N,
                     LinearArgs{M, K, N}));
  }
  Value out = result(c, y, x.requires_grad());
  if (!out.requires_grad() || !c.recording()) return out;
  const Param* pw = &weight;
  c.record(Node{
      name, {x.id}, {out.id}, [&b, pw, xmeta = x.t.meta(), M, K, N, name](std::vector<Tensor>& g) {
        Tensor w = nf4_dequantize(b, *pw, name + " backward");
        Tensor gx =
            empty_tensor(b, xmeta, MemCategory::kTemporary, kCompute, name + " grad_input");
        b.launch(kCompute,
                 make_op(OpKind::kLinearBackwardInput, name + " backward_input",
                         {g[0].ref(), w.ref()}, {gx.ref()}, 2.0 * M * K * N, LinearArgs{M, K, N}));
        return std::vector<Tensor>{gx};
      }});
  return out;
}

}  // namespace ops
}  // namespace fullshard
