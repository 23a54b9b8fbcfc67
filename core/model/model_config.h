#pragma once
// Decoder-only transformer hyperparameters: a named size from the zoo, a Hugging Face
// config.json, or an inline scenario object.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/model/implementation.h"
#include "core/model/mla_config.h"
#include "core/model/moe_config.h"
#include "core/runtime/rope_args.h"

namespace fullshard {

enum class ModelArch : uint8_t {
  kLlama,  // RMSNorm, RoPE, GQA attention, SwiGLU MLP, untied output (Llama/Mistral/Qwen2)
  kGpt2,   // LayerNorm (with bias), learned positions, MHA, GELU MLP, tied output
};

// model.lora (PEFT's LoraConfig): adapters lora_A [rank, in] and lora_B [out, rank] on each
// target linear, y = base(x) + (alpha / rank) * lora_B(lora_A(x)); every base parameter is then
// frozen (NOTE [LoRA] in core/model/lora.cc). rank 0: no adapters.
struct LoraConfig {
  int64_t rank = 0;
  double alpha = 0;
  // Llama module names (wq, wk, wv, wo, w1, w2, w3), mapped from PEFT's (q_proj, ...) at parse.
  std::vector<std::string> target_modules;
  bool enabled() const { return rank > 0; }
  double scaling() const { return alpha / static_cast<double>(rank); }
};

// QLoRA's NF4 base weights (training.frozen_dtype "nf4", training.nf4): torchao's to_nf4 block
// sizes (NOTE [NF4] in core/tensor/nf4.cc).
struct Nf4Config {
  bool enabled = false;
  int64_t block_size = 64;
  int64_t scaler_block_size = 256;
};

struct ModelConfig {
  std::string name;  // "llama3.1-8b", or the HF model_type for imports
  ModelArch arch = ModelArch::kLlama;
  int64_t vocab_size = 0;
  int64_t dim = 0;  // hidden size
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;   // == n_heads for MHA
  int64_t ffn_dim = 0;      // MLP intermediate size
  int64_t max_seq_len = 0;  // learned-position table size (GPT-2); RoPE limit (Llama)
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;            // config.json rope_scaling (Llama 3.1, YaRN); factor 0: none
  bool tie_embeddings = false;         // output projection shares the embedding weight
  bool qkv_bias = false;               // Qwen2: bias on q/k/v projections
  bool linear_bias = false;            // GPT-2: bias on every linear, LayerNorm has bias
  ModelImplementation implementation;  // how the model is coded (scenario model.implementation)
  // Qwen3's decoupled head size (HF head_dim, e.g. 128 with hidden 2048 / 32 heads): q is
  // [n_heads * head_dim, dim], o [dim, n_heads * head_dim]. 0: dim / n_heads.
  int64_t explicit_head_dim = 0;
  bool qk_norm = false;  // Qwen3: RMSNorm (weight [head_dim]) on each head of q and of k
  MoeConfig moe;         // mixture-of-experts FFN (core/model/moe_config.h); dense when disabled
  MlaConfig mla;  // DeepSeek's multi-head latent attention (core/model/mla_config.h); off: GQA
  LoraConfig lora;       // model.lora: LoRA adapters (none when rank is 0)

  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : dim / n_heads; }
  RopeParams rope() const { return RopeParams(rope_theta, rope_scaling); }
};

// Exact number of parameters (what sum(p.numel() for p in model.parameters()) gives,
// counting a tied weight once).
int64_t parameter_count(const ModelConfig& c);

// The named sizes fullshard ships; names are lower-case, e.g. "llama3.1-70b", "gpt2-124m".
// Every entry and its published parameter count is listed in docs/models.md.
const std::vector<ModelConfig>& model_zoo();
// Case-insensitive; also knows the Hugging Face names "gpt2", "gpt2-medium", "gpt2-large",
// "gpt2-xl" and "mistral-7b-v0.3". nullopt when unknown.
std::optional<ModelConfig> find_model(const std::string& name);

// Reads a Hugging Face config.json (architectures Llama/Mistral/Qwen2 and GPT-2); the
// result's name is the model_type. `where` prefixes error paths: a file name gives
// "config.json: hidden_size", a JSON path gives "model.hf_config.hidden_size". Field rules
// and defaults are in docs/models.md. Throws InputError.
ModelConfig model_from_hf_config(const nlohmann::json& j, const std::string& where);
// `path` is a config.json or a model directory containing one. Missing file or malformed
// JSON: InputError naming the path.
ModelConfig model_from_hf_config_file(const std::string& path);

// Checks the invariants the model code relies on (dim % n_heads == 0, n_heads % n_kv_heads
// == 0, all sizes >= 1). Throws InputError naming `where`.field.
void validate_model(const ModelConfig& c, const std::string& where);

}  // namespace fullshard
