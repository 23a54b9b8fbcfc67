#pragma once
// Hugging Face names and layouts of fullshard's parameters, for `fullshard checkpoint export`
// and for loading Hugging Face weight files (docs/checkpoints.md).
//
// NOTE [Hugging Face layouts]: fullshard's Llama uses Meta's names (tok_embeddings,
// attention.wq, feed_forward.w1) in nn.Linear's [out, in] layout, and its rotary embedding
// is Hugging Face's rotate_half convention (backends/cpu/kernels/rope.cc), so LlamaForCausalLM
// takes the tensors as they are, renamed; Meta's checkpoints would need q/k rows permuted, ours
// do not (under "complex" RoPE they do: NOTE [Rotary pairing of weight files] below). GPT-2 is different: Hugging Face's GPT2Model keeps OpenAI's Conv1D modules, whose
// weight is [in, out] (y = x W + b), while fullshard's c_attn / c_proj / c_fc weights are
// nn.Linear's [out, in]; those four 2-D weights are transposed on export. Names are those
// GPT2LMHeadModel.save_pretrained writes ("transformer.h.0.attn.c_attn.weight"); the tied
// lm_head is not stored (as Hugging Face omits tied weights).
//
// NOTE [Hugging Face names of experts]: fullshard keeps torchtitan's GroupedExperts weights
// w1 / w3 [E, F, D] and w2 [E, D, F]; the hub's files (what save_pretrained writes, also in
// transformers 5, whose modules fuse them as gate_up_proj / down_proj) hold one [F, D] / [D, F]
// tensor per expert: Mixtral "block_sparse_moe.experts.{e}.w1/w2/w3.weight", Qwen3-MoE and
// DeepSeek-V3 "mlp.experts.{e}.gate_proj/down_proj/up_proj.weight". So one parameter is E file
// tensors (per_expert), expert e's slice [e] of it, in the same row-major layout. The router
// gate is "block_sparse_moe.gate" / "mlp.gate"; DeepSeek-V3's expert-bias buffer is
// "mlp.gate.e_score_correction_bias" and its shared experts "mlp.shared_experts.*". MLA's
// linears take DeepSeek-V3's names (q_a_proj, q_a_layernorm, kv_a_proj_with_mqa, ...); their
// rope rows move unless the model runs "complex" RoPE (NOTE [Rotary pairing of weight files]).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fullshard {

struct ModelConfig;

struct HfTensorName {
  std::string name;        // e.g. "model.layers.0.self_attn.q_proj.weight"
  bool transpose = false;  // a GPT-2 Conv1D weight: [out, in] -> [in, out]
  // A routed experts' weight [E, ...] stored as E tensors: `name` holds "{e}" where expert e's
  // index goes (NOTE [Hugging Face names of experts]).
  bool per_expert = false;
  std::string expert_name(int64_t e) const;
};

// Which Hugging Face model's names fullshard's model `c` takes: "llama", "gpt2", "mixtral"
// (a MoE model whose name says mixtral), "deepseek_v3" (MLA, shared experts or the expert bias)
// or "qwen3_moe" (any other MoE model). Checkpoints record it as their "arch".
std::string hf_arch(const ModelConfig& c);

// The Hugging Face name of parameter (or persistent buffer) `fqn` of a model whose hf_arch is
// `arch`; nullopt for a name with no Hugging Face counterpart.
std::optional<HfTensorName> hf_tensor_name(const std::string& arch, const std::string& fqn);

// NOTE [Rotary pairing of weight files]: RoPE rotates pairs of q / k columns, and which columns
// pair is a property of the weights: Hugging Face's Llama-family files pair column i with i + r/2
// of each head's r rotary columns (rotate_half; its conversion script permuted Meta's rows),
// DeepSeek-V3's files (rope_interleave) pair 2i with 2i + 1, as torchtitan's complex RoPE does.
// fullshard's "fused" and "rotate_half" RoPE pair by halves, "complex" adjacently. So a file
// loaded into the other pairing has its rotary rows permuted within each head, as torchtitan's
// state-dict adapters permute q / k: q / k weights and biases and Qwen3's q / k norms per head;
// MLA's wq / wq_b rope rows of each head and wkv_a's k_pe rows.
// Whether model `c` pairs RoPE columns otherwise than its Hugging Face files do.
bool hf_rope_pairing_differs(const ModelConfig& c);
// For each row of parameter `fqn` ([rows, ...] or [rows]) of model `c`, the row of its Hugging
// Face tensor that holds it; empty when they are the same rows (no permutation).
std::vector<int64_t> hf_rope_row_order(const ModelConfig& c, const std::string& fqn, int64_t rows);

}  // namespace fullshard
