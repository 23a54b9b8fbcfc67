#pragma once
// Hugging Face names and layouts of fullshard's parameters, for `fullshard checkpoint export`
// (docs/checkpoints.md).
//
// NOTE [Hugging Face layouts]: fullshard's Llama uses Meta's names (tok_embeddings,
// attention.wq, feed_forward.w1) in nn.Linear's [out, in] layout, and its rotary embedding
// is Hugging Face's rotate_half convention (backends/cpu/kernels/rope.cc), so LlamaForCausalLM
// takes the tensors as they are, renamed; Meta's checkpoints would need q/k rows permuted, ours
// do not. GPT-2 is different: Hugging Face's GPT2Model keeps OpenAI's Conv1D modules, whose
// weight is [in, out] (y = x W + b), while fullshard's c_attn / c_proj / c_fc weights are
// nn.Linear's [out, in]; those four 2-D weights are transposed on export. Names are those
// GPT2LMHeadModel.save_pretrained writes ("transformer.h.0.attn.c_attn.weight"); the tied
// lm_head is not stored (as Hugging Face omits tied weights).
#include <optional>
#include <string>

namespace fullshard {

struct HfTensorName {
  std::string name;        // e.g. "model.layers.0.self_attn.q_proj.weight"
  bool transpose = false;  // a GPT-2 Conv1D weight: [out, in] -> [in, out]
};

// The Hugging Face name of parameter `fqn` of a model of architecture `arch` ("llama" or
// "gpt2"); nullopt for a name with no Hugging Face counterpart.
std::optional<HfTensorName> hf_tensor_name(const std::string& arch, const std::string& fqn);

}  // namespace fullshard
