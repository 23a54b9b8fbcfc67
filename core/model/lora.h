#pragma once
// Frozen parameters (requires_grad=False) and LoRA adapters (PEFT's LoraLayer on nn.Linear):
// the module tree's changes and the adapted linear's forward, op by op.
#include <string>
#include <vector>

#include "core/model/autograd.h"
#include "core/model/model_config.h"

namespace fullshard {

// PEFT's target_modules names for Llama and the module each names ("q_proj" -> "wq", ...);
// empty when `peft_name` is none of them.
std::string lora_module_for(const std::string& peft_name);
const std::vector<std::string>& lora_peft_names();  // q_proj, k_proj, ..., down_proj

// Adds lora_A (Linear, weight [rank, in], kaiming-uniform as PEFT) and lora_B (Linear, weight
// [out, rank], zeros) under every block's linear named in lora.target_modules. Llama only.
void add_lora_adapters(Module& root, const LoraConfig& lora);

// requires_grad=False on every parameter whose fqn matches one of `patterns` (fnmatch, as
// Python's fnmatch.fnmatch: '*' crosses dots) and, with `lora`, on every parameter that is not
// an adapter's; frozen parameters are kept in `frozen_dtype`. Returns how many were frozen.
// With `nf4` enabled, every frozen block Linear's weight is NF4 (Param::nf4_block_size, dtype
// bf16) and the other frozen parameters are kept in `frozen_dtype` (bf16): torchtune's QLoRA
// (FrozenNF4Linear for the attention and MLP projections of every block; its builders leave
// the output projection, the norms and the embedding in bf16).
int freeze_parameters(Module& root, const std::vector<std::string>& patterns, bool lora,
                      DType frozen_dtype, const Nf4Config& nf4 = {});
bool fnmatch_fqn(const std::string& pattern, const std::string& fqn);
// A script's model.to(dtype) before fully_shard: every parameter stored in `orig` (FSDP2's
// orig_dtype; training.orig_dtype). Runs before freeze_parameters, which keeps the frozen ones
// in their own dtype.
void set_orig_dtype(Module& root, DType orig);

// Whether `p` is a LoRA adapter's weight (lora_A / lora_B), which a loaded base has not.
bool is_lora_adapter(const Param& p);
// Whether `linear` carries adapters (a lora_A child).
bool has_lora(const Module& linear);

namespace ops {
// x * factor (a Python float): MulBackward0 saves no tensor, its backward scales the gradient.
Value scale(ExecContext& c, Value x, double factor, const std::string& name);
// PEFT LoraLayer.forward with dropout 0: base(x) + lora_B(lora_A(x)) * scaling, each a module
// op (NOTE [LoRA] in lora.cc). `bias`: the base linear's.
Value lora_linear(ExecContext& c, Value x, Module& linear, const Param* bias, double scaling,
                  const std::string& name);
// QLoRA's frozen NF4 linear, torchao's LinearNF4 (NOTE [NF4 linear] in lora.cc): the weight
// dequantised to bf16 (a temporary) for the matmul, again for grad_input; no grad_weight.
Value nf4_linear(ExecContext& c, Value x, const Param& weight, const Param* bias,
                 const std::string& name);
// weight.to(bf16) of an unsharded NF4 weight: kNF4Dequantize into a bf16 temporary.
Tensor nf4_dequantize(Backend& b, const Param& weight, const std::string& name);
}  // namespace ops

}  // namespace fullshard
