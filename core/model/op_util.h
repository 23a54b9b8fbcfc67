#pragma once
// Internal to core/model's op files (ops.cc, eager_norm.cc, ...): building an OpCall with its
// cost, the unsharded parameter an op reads, a parameter's gradient buffer, and a Value for an
// op's output.
#include <string>
#include <utility>
#include <vector>

#include "core/common/error.h"
#include "core/model/autograd.h"
#include "core/runtime/op_args.h"
#include "core/runtime/rope_args.h"

namespace fullshard::ops::detail {

constexpr StreamRole kCompute = StreamRole::kDefault;

// bytes = every input and output once (NOTE [Op costs] in ops.cc). `args` is the kind's typed
// argument struct (op_kinds.def's Args column), which writes op.iargs / op.fargs: no call site
// fills them by position.
template <class Args = NoArgs>
OpCall make_op(OpKind kind, const std::string& name, std::vector<TensorRef> in,
               std::vector<TensorRef> out, double flops, const Args& args = {}) {
  OpCall op;
  op.kind = kind;
  op.name = name;
  double bytes = 0;
  for (auto& r : in) bytes += static_cast<double>(r.nbytes());
  for (auto& r : out) bytes += static_cast<double>(r.nbytes());
  op.inputs = std::move(in);
  op.outputs = std::move(out);
  op.flops = flops;
  op.bytes = bytes;
  args.encode(op);
  return op;
}

inline Tensor param_tensor(const Param& p) {
  FULLSHARD_CHECK(p.binding != nullptr, "parameter " + p.fqn + " is not bound");
  Tensor t = p.binding->unsharded();
  // NOTE [Forward methods] in core/fsdp/fully_shard.cc: a method other than forward.
  FULLSHARD_CHECK(static_cast<bool>(t),
                  "parameter " + p.fqn +
                      " used while sharded: its FSDP unit's forward hooks did not run (a method "
                      "other than forward needs register_fsdp_forward_method(module, name))");
  return t;
}

inline Tensor new_param_grad(Backend& b, const Param& p) {
  TensorMeta m{p.binding->compute_dtype(), p.shape};
  auto cat =
      p.binding->has_unsharded_grad() ? MemCategory::kTemporary : MemCategory::kUnshardedGrad;
  return empty_tensor(b, m, cat, kCompute, p.fqn + ".grad");
}

// The weight gradient a fused norm backward writes: the parameter's .grad, or for a frozen
// parameter a temporary dropped right after the kernel (NOTE [Frozen norm weights] in lora.cc).
inline Tensor frozen_or_param_grad(Backend& b, const Param& p) {
  if (p.requires_grad) return new_param_grad(b, p);
  return empty_tensor(b, TensorMeta{p.binding->compute_dtype(), p.shape}, MemCategory::kTemporary,
                       kCompute, p.fqn + ".grad (frozen: dropped)");
}

inline Value result(ExecContext& c, Tensor t, bool requires_grad) {
  return Value{std::move(t), requires_grad && c.recording() ? c.new_id() : 0};
}

inline Tensor grad_like(Backend& b, const Tensor& t, const std::string& name) {
  return empty_tensor(b, t.meta(), MemCategory::kTemporary, kCompute, name);
}

inline double el(const Tensor& t) { return static_cast<double>(t.numel()); }

// Op-level selective activation checkpointing (ops.cc): whether this op's outputs are saved,
// the cached outputs in a recompute (else nullptr), and storing them in the forward.
bool sac_saves(ExecContext& c, bool is_mm);
std::vector<Tensor>* sac_cached(ExecContext& c, bool saves);
void sac_store(ExecContext& c, bool saves, std::vector<Tensor> outs);

// nn.Linear's autograd node for `out` = x W^T (+ bias) already computed (by ops::linear, or
// by a fused kernel that also computed x: async TP's all-gather-matmul): saves x and the
// weight; backward launches grad_input (when x requires grad), grad_weight and grad_bias.
void record_linear(ExecContext& c, const Value& x, const Param& weight, const Param* bias,
                   const Value& out, const std::string& name);

// A position-dependent rotation of x (a RoPE kernel: fargs RopeParams::fargs(), iargs {head_dim})
// and its autograd node, whose backward is the inverse rotation `backward` into a temporary named
// name + grad_suffix. The fused rope and the complex (torchtitan) rope differ only in kinds and
// FLOPs per element.
Value rotary(ExecContext& c, Value x, OpKind forward, OpKind backward, double flops_per_element,
             int64_t head_dim, const RopeParams& freqs, const std::string& name,
             const std::string& grad_suffix);

}  // namespace fullshard::ops::detail
