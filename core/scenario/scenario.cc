#include "core/scenario/scenario.h"

#include "core/model/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/scenario/float8_checks.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/lora_checks.h"
#include "core/scenario/moe_checks.h"
#include "core/scenario/scenario_sections.h"

// NOTE [Scenario errors]: every user mistake is an InputError whose where() is the exact JSON
// path of the bad value ("fsdp.mesh.shape[1]"), whose message shows the value as written and
// says what to write instead. Checks run in document order (model, training, hardware, fsdp)
// and stop at the first error, so a message never depends on a later section.

namespace fullshard {
namespace {

namespace fs = std::filesystem;
namespace jr = json_reader;
using nlohmann::json;
using scenario_detail::check_async_tp;
using scenario_detail::check_fields;
using scenario_detail::check_units_and_loss;
using scenario_detail::field_int;
using scenario_detail::kInf;
using scenario_detail::kMaxInt;
using scenario_detail::kMaxRanksPerDim;
using scenario_detail::kMaxSize;
using scenario_detail::parse_context_parallel;
using scenario_detail::parse_fsdp;
using scenario_detail::parse_pipeline_parallel;
using scenario_detail::parse_tensor_parallel;
using scenario_detail::parse_training;
using scenario_detail::resolve;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr uint64_t kMiB = uint64_t{1} << 20;

// ---------------------------------------------------------------- field tables
// Profile figures a scenario may override directly in "hardware" (NOTE [Hardware overrides]).
// memory_bytes / non_allocator_bytes have their own GiB-or-bytes fields and gpus_per_node is
// the layout's, so they are read by the fields of the same name.
const std::vector<std::string> kOwnHardwareFields = {"memory_bytes", "non_allocator_bytes",
                                                     "gpus_per_node", "cuda_total_memory_bytes"};

std::vector<std::string> hardware_fields() {
  std::vector<std::string> f = {"profile",
                                "gpus_per_node",
                                "nodes",
                                "memory_gib",
                                "memory_bytes",
                                "non_allocator_gib",
                                "non_allocator_bytes",
                                "allocator",
                                "host_threads_per_rank",
                                "rank_speed"};
  for (const auto& name : hardware_profile_figures())
    if (std::find(kOwnHardwareFields.begin(), kOwnHardwareFields.end(), name) ==
        kOwnHardwareFields.end())
      f.push_back(name);
  return f;
}

const std::map<std::string, std::vector<std::string>> kFields = {
    {"",
     {"$schema", "name", "description", "model", "training", "fsdp", "tensor_parallel",
      "pipeline_parallel", "context_parallel", "expert_parallel", "hardware"}},
    {"tensor_parallel", {"loss_parallel", "async"}},
    {"context_parallel", {"rotate_method"}},
    {"pipeline_parallel",
     {"schedule", "microbatch_size", "layers_per_stage", "first_stage_less_layers",
      "last_stage_less_layers", "module_fqns_per_model_part"}},
    {"expert_parallel", {"degree", "receive_buffers"}},
    {"model",
     {"name", "hf_config", "arch", "vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads",
      "ffn_dim", "max_seq_len", "norm_eps", "rope_theta", "tie_embeddings", "qkv_bias",
      "linear_bias", "implementation", "weights", "lora", "moe"}},
    {"model.moe",
     {"capacity_factor", "drop_policy", "load_balance", "load_balance_coeff", "num_expert_groups",
      "num_limited_groups"}},
    {"model.lora", {"rank", "alpha", "target_modules"}},
    {"model.implementation",
     {"preset", "loss", "loss_chunks", "keep_logits", "rms_norm", "rope", "gqa", "attention",
      "compile", "loss_normalization"}},
    {"training",
     {"batch_per_rank", "rank_batch", "seq_len", "steps", "grad_accum_steps",
      "grad_sync_during_accumulation", "activation_checkpointing", "optimizer", "seed", "data",
      "checkpoint", "moe_routing", "float8", "init", "reshard_after_backward_during_accumulation",
      "frozen", "frozen_dtype", "nf4", "orig_dtype", "generate_every"}},
    {"training.nf4", {"block_size", "scaler_block_size"}},
    {"training.moe_routing", {"hot_expert_factor", "recorded", "expert_load", "statistic"}},
    {"training.float8",
     {"recipe", "enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp",
      "filter_fqns"}},
    {"training.checkpoint", {"every", "mode", "storage_write_bandwidth"}},
    {"training.data", {"path", "format", "val_path", "sampling", "tokenizer", "bos", "eos"}},
    {"training.rank_batch", {"rank", "batch"}},
    {"training.optimizer",
     {"lr", "beta1", "beta2", "eps", "weight_decay", "max_grad_norm", "implementation"}},
    {"training.activation_checkpointing", {"mode", "every"}},
    {"fsdp",
     {"mesh", "reshard_after_forward", "per_unit", "mixed_precision", "cpu_offload", "units",
      "forward_prefetch", "backward_prefetch", "gradient_divide_factor",
      "force_sum_reduction_for_comms", "post_optim_event", "ignored_params", "unshard",
      "unshard_async_op", "forward_methods"}},
    {"fsdp.mesh", {"shape", "dim_names"}},
    {"fsdp.unshard", {"modules", "async_op"}},
    {"fsdp.mixed_precision",
     {"param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs"}},
    {"fsdp.cpu_offload", {"pin_memory"}},
    {"hardware", hardware_fields()},
    {"hardware.allocator", {"expandable_segments", "max_split_size_mb"}},
    {"hardware.rank_speed", {"rank", "speed"}},
};

// Names other tools use for our fields (torchtitan, Hugging Face, torchrun, PyTorch), so that
// an unknown key can be answered with the spelling this format uses.
struct Alias {
  const char* section;
  const char* alias;
  const char* field;
};
constexpr Alias kAliases[] = {
    {"training", "batch_size", "batch_per_rank"},
    {"training", "micro_batch_size", "batch_per_rank"},
    {"training", "local_batch_size", "batch_per_rank"},
    {"training", "sequence_length", "seq_len"},
    {"training", "gradient_accumulation_steps", "grad_accum_steps"},
    {"training", "gradient_checkpointing", "activation_checkpointing"},
    {"training", "ac", "activation_checkpointing"},
    {"training", "max_steps", "steps"},
    {"training", "num_steps", "steps"},
    {"training.optimizer", "learning_rate", "lr"},
    {"training.optimizer", "epsilon", "eps"},
    {"training.optimizer", "grad_clip", "max_grad_norm"},
    {"training.optimizer", "clip_grad_norm", "max_grad_norm"},
    {"context_parallel", "context_parallel_rotate_method", "rotate_method"},
    {"context_parallel", "cp_rotate_method", "rotate_method"},
    {"fsdp", "mp_policy", "mixed_precision"},
    {"fsdp", "mp", "mixed_precision"},
    {"fsdp", "offload_policy", "cpu_offload"},
    {"fsdp", "device_mesh", "mesh"},
    {"fsdp.mesh", "mesh_shape", "shape"},
    {"fsdp.mesh", "mesh_dim_names", "dim_names"},
    {"fsdp.mixed_precision", "dtype", "param_dtype"},
    {"hardware", "gpu", "profile"},
    {"hardware", "device", "profile"},
    {"hardware", "num_nodes", "nodes"},
    {"hardware", "nnodes", "nodes"},
    {"hardware", "num_gpus", "gpus_per_node"},
    {"hardware", "nproc_per_node", "gpus_per_node"},
    {"hardware", "memory_gb", "memory_gib"},
    {"model", "hidden_size", "dim"},
    {"model", "n_embd", "dim"},
    {"model", "num_hidden_layers", "n_layers"},
    {"model", "num_attention_heads", "n_heads"},
    {"model", "num_key_value_heads", "n_kv_heads"},
    {"model", "intermediate_size", "ffn_dim"},
    {"model", "max_position_embeddings", "max_seq_len"},
    {"model", "config", "hf_config"},
};

const std::vector<std::string>& fields(const std::string& section) { return kFields.at(section); }

// ---------------------------------------------------------------- model
// model.implementation: a preset name, or {"preset": name, <field>: <value>, ...} (docs/ops.md).
// A variant fullshard does not model yet is refused, never replaced by another.
ModelImplementation parse_implementation(const json& j) {
  const std::string P = "model.implementation";
  const auto& names = implementation_presets();
  auto preset = [&](const json& v, const std::string& path) {
    return *find_implementation_preset(jr::get_choice(v, path, names));
  };
  ModelImplementation m;
  if (j.is_string()) {
    m = preset(j, P);
  } else {
    jr::require_object(
        j, P, "\"torchtitan-2024\" or {\"preset\": \"fullshard\", \"rms_norm\": \"eager\"}");
    check_fields(j, P);
    if (j.contains("preset")) m = preset(j.at("preset"), P + ".preset");
    for (const auto& f : implementation_fields()) {
      if (!j.contains(f)) continue;
      const std::string path = jr::child_path(P, f);
      if (f == "keep_logits")
        m.keep_logits = jr::get_bool(j.at(f), path);
      else if (f == "loss_chunks")
        m.loss_chunks = static_cast<int>(field_int(j, P, "loss_chunks", 1, 1 << 20, "8"));
      else if (f == "compile")
        m.compile = jr::get_bool(j.at(f), path);
      else
        set_implementation_value(m, f, jr::get_choice(j.at(f), path, implementation_values(f)));
    }
  }
  const auto unbuilt = unbuilt_variants(m);
  if (!unbuilt.empty())
    throw InputError(P,
                     "asks for " + jr::join(unbuilt, "'", " and ") + " (preset '" + m.preset +
                         "'), which fullshard does not model yet",
                     "override those fields with a built variant (docs/ops.md lists them), or use "
                     "preset 'fullshard'");
  return m;
}

ModelConfig zoo_model(const std::string& name, const std::string& where) {
  if (auto m = find_model(name)) return *m;
  std::vector<std::string> names;
  for (const auto& m : model_zoo()) names.push_back(m.name);
  std::string fix;
  if (auto near = jr::closest(name, names)) fix = "did you mean '" + *near + "'? ";
  fix += "known models: " + jr::join(names, "'", ", ") +
         "; or use {\"hf_config\": \"path/to/config.json\"} or an inline model with \"arch\"";
  throw InputError(where, "unknown model '" + name + "'", fix);
}

ModelArch parse_arch(const json& v, const std::string& path) {
  return jr::get_choice(v, path, {"llama", "gpt2"}) == "gpt2" ? ModelArch::kGpt2
                                                              : ModelArch::kLlama;
}

// Applies every size/flag field present in `j` on top of `c`.
void apply_model_fields(const json& j, ModelConfig& c) {
  const std::string P = "model";
  if (j.contains("arch")) c.arch = parse_arch(j.at("arch"), "model.arch");
  const std::pair<const char*, int64_t*> sizes[] = {
      {"vocab_size", &c.vocab_size},  {"dim", &c.dim},
      {"n_layers", &c.n_layers},      {"n_heads", &c.n_heads},
      {"n_kv_heads", &c.n_kv_heads},  {"ffn_dim", &c.ffn_dim},
      {"max_seq_len", &c.max_seq_len}};
  for (const auto& [key, dst] : sizes)
    if (j.contains(key)) *dst = field_int(j, P, key, 1, kMaxSize, "4096");
  if (j.contains("norm_eps"))
    c.norm_eps = jr::get_number(j.at("norm_eps"), "model.norm_eps", 0, false, 1, false, "1e-5");
  if (j.contains("rope_theta"))
    c.rope_theta =
        jr::get_number(j.at("rope_theta"), "model.rope_theta", 0, false, kInf, false, "500000");
  const std::pair<const char*, bool*> flags[] = {{"tie_embeddings", &c.tie_embeddings},
                                                 {"qkv_bias", &c.qkv_bias},
                                                 {"linear_bias", &c.linear_bias}};
  for (const auto& [key, dst] : flags)
    if (j.contains(key)) *dst = jr::get_bool(j.at(key), jr::child_path(P, key));
}

ModelConfig parse_model(const json& j, const std::string& base_dir) {
  const std::string P = "model";
  if (j.is_string()) {
    ModelConfig c = zoo_model(j.get<std::string>(), P);
    validate_model(c, P);
    return c;
  }
  if (!j.is_object())
    throw InputError(P, "is " + jr::describe(j) + ", not a model",
                     "write a zoo name such as \"llama3.1-8b\", {\"name\": \"llama3.1-8b\", "
                     "\"n_layers\": 4}, {\"hf_config\": \"path/to/config.json\"} or an inline "
                     "model with \"arch\" and every size");
  check_fields(j, P);

  ModelConfig c;
  if (j.contains("hf_config")) {
    if (j.contains("name"))
      throw InputError("model.name", "is given together with model.hf_config",
                       "give either a zoo \"name\" or an \"hf_config\" path, not both");
    const std::string rel =
        jr::get_string(j.at("hf_config"), "model.hf_config", "\"models/llama/config.json\"");
    const std::string path = resolve(base_dir, rel);
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw InputError("model.hf_config", "file not found: '" + path + "'",
                       "give the path of a Hugging Face config.json (or of its directory), "
                       "relative to the scenario file's directory");
    c = model_from_hf_config_file(path);
  } else if (j.contains("name") &&
             (!j.contains("arch") ||
              (j.at("name").is_string() && find_model(j.at("name").get<std::string>())))) {
    // A zoo model, possibly with overrides. (A name that is not in the zoo labels an inline
    // model when "arch" is given.)
    c = zoo_model(jr::get_string(j.at("name"), "model.name", "\"llama3.1-8b\""), "model.name");
  } else {
    static const char* const kRequired[] = {"arch",    "vocab_size", "dim",        "n_layers",
                                            "n_heads", "ffn_dim",    "max_seq_len"};
    for (const char* key : kRequired)
      jr::require_field(j, P, key,
                        "an inline model (no zoo \"name\" and no \"hf_config\") gives arch, "
                        "vocab_size, dim, n_layers, n_heads, ffn_dim and max_seq_len");
    c.name =
        j.contains("name") ? jr::get_string(j.at("name"), "model.name", "\"my-model\"") : "custom";
    c.arch = parse_arch(j.at("arch"), "model.arch");
    if (c.arch == ModelArch::kGpt2) {  // GPT-2's architecture: tied output, biases everywhere
      c.tie_embeddings = true;
      c.linear_bias = true;
    }
    c.n_heads = field_int(j, P, "n_heads", 1, kMaxSize, "32");
    c.n_kv_heads = c.n_heads;  // MHA unless n_kv_heads says otherwise
  }
  apply_model_fields(j, c);
  if (j.contains("implementation")) c.implementation = parse_implementation(j.at("implementation"));
  validate_model(c, P);
  if (j.contains("moe")) apply_moe_options(j.at("moe"), c);
  if (j.contains("lora")) c.lora = scenario_detail::parse_lora(j.at("lora"), c);
  if (c.implementation.attention != AttentionImpl::kFlash && c.arch == ModelArch::kGpt2)
    throw InputError("model.implementation.attention",
                     std::string("is \"") + attention_impl_name(c.implementation.attention) +
                         "\" for a GPT-2 model (packed q / k / v), which fullshard models with "
                         "flash attention only",
                     "use \"flash\"");
  if (c.implementation.compile && c.arch == ModelArch::kGpt2)
    throw InputError("model.implementation.compile",
                     "is true for a GPT-2 model, which fullshard compiles for Llama only",
                     "set compile to false");
  if (c.implementation.attention == AttentionImpl::kEfficient &&
      c.implementation.gqa == GqaImpl::kNative && c.n_kv_heads != c.n_heads)
    throw InputError(
        "model.implementation.attention",
        "is \"efficient\" with " + std::to_string(c.n_kv_heads) + " kv heads for " +
            std::to_string(c.n_heads) +
            " query heads: PyTorch's efficient SDPA backend takes no GQA",
        "set model.implementation.gqa to \"repeat_kv\", or use attention \"flash\" or \"cudnn\"");
  return c;
}

// model.weights: a path relative to the scenario's folder. Only its presence is checked
// here; the launcher checks every tensor's name, dtype and shape (runner/init_weights.h).
std::string parse_model_weights(const json& j, const std::string& base_dir) {
  if (!j.is_object() || !j.contains("weights")) return "";
  const std::string rel = jr::get_string(j.at("weights"), "model.weights", "\"model.safetensors\"");
  const std::string path = resolve(base_dir, rel);
  std::error_code ec;
  if (rel.empty() || !fs::exists(path, ec))
    throw InputError("model.weights", "file not found: '" + path + "'",
                     "give a .safetensors file, or a folder holding model.safetensors or "
                     "model.safetensors.index.json, relative to the scenario file's directory");
  return path;
}

// ---------------------------------------------------------------- hardware
// A byte count given either in GiB (a number) or in bytes (an integer), never both.
std::optional<uint64_t> bytes_override(const json& j, const std::string& stem, double min_gib) {
  const std::string P = "hardware";
  const std::string gib_key = stem + "_gib", bytes_key = stem + "_bytes";
  if (j.contains(gib_key) && j.contains(bytes_key))
    throw InputError(jr::child_path(P, bytes_key),
                     "is given together with " + jr::child_path(P, gib_key),
                     "give only one of " + gib_key + " and " + bytes_key);
  const bool positive = min_gib > 0;
  if (j.contains(gib_key)) {
    const double gib = jr::get_number(j.at(gib_key), jr::child_path(P, gib_key), 0, !positive,
                                      1 << 20, true, positive ? "80" : "1.5");
    return static_cast<uint64_t>(std::llround(gib * kGiB));
  }
  if (j.contains(bytes_key))
    return static_cast<uint64_t>(field_int(j, P, bytes_key.c_str(), positive ? 1 : 0,
                                           std::numeric_limits<int64_t>::max(),
                                           positive ? "85899345920" : "2147483648"));
  return std::nullopt;
}

// [{"rank": 3, "speed": 0.8}, ...]: ranks whose compute runs at `speed` x the profile's.
std::map<int, double> parse_rank_speed(const json& v, int world) {
  const std::string P = "hardware.rank_speed";
  const std::string example = "[{\"rank\": 3, \"speed\": 0.8}]";
  if (!v.is_array())
    throw InputError(P, "is " + jr::describe(v) + ", not an array",
                     "write a list such as " + example);
  std::map<int, double> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = jr::index_path(P, i);
    jr::require_object(v[i], at, "{\"rank\": 3, \"speed\": 0.8}");
    jr::reject_unknown_fields(v[i], at, fields(P));
    jr::require_field(v[i], at, "rank", "add \"rank\": the global rank that runs at another speed");
    jr::require_field(v[i], at, "speed",
                      "add \"speed\": its compute throughput relative to the profile, e.g. 0.8");
    const int rank =
        static_cast<int>(jr::get_int(v[i].at("rank"), at + ".rank", 0, world - 1, "0"));
    const double speed =  // NOTE [Figure bounds]
        jr::get_number(v[i].at("speed"), at + ".speed", kMinFigureFraction, true, 1000, true,
                       "0.8");
    if (!out.emplace(rank, speed).second)
      throw InputError(at + ".rank", "is " + std::to_string(rank) + ", given twice",
                       "give each rank once");
  }
  return out;
}

HardwareOptions parse_hardware(const json& j, const std::string& base_dir) {
  const std::string P = "hardware";
  jr::require_object(j, P, "{\"profile\": \"h100-sxm-80gb\", \"nodes\": 1}");
  check_fields(j, P);
  jr::require_field(j, P, "profile",
                    "add \"profile\": a name from scenarios/hardware/, e.g. \"h100-sxm-80gb\"");
  HardwareOptions h;
  h.profile = jr::get_string(j.at("profile"), "hardware.profile", "\"h100-sxm-80gb\"");
  if (h.profile.size() > 5 && h.profile.compare(h.profile.size() - 5, 5, ".json") == 0) {
    const std::string path = resolve(base_dir, h.profile);
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw InputError("hardware.profile", "file not found: '" + path + "'",
                       "give a profile name or the path of a profile .json, relative to the "
                       "scenario file's directory");
    h.device = load_hardware_profile_file(path);
  } else {
    h.device = load_hardware_profile(h.profile, "hardware.profile");
  }
  h.gpus_per_node =
      j.contains("gpus_per_node")
          ? static_cast<int>(field_int(j, P, "gpus_per_node", 1, kMaxRanksPerDim, "8"))
          : h.device.gpus_per_node;
  check_gpus_per_node(h.device, h.gpus_per_node,
                      "hardware.gpus_per_node");  // NOTE [Ranks per node]
  if (j.contains("nodes"))
    h.nodes = static_cast<int>(field_int(j, P, "nodes", 1, kMaxRanksPerDim, "2"));
  if (int64_t{h.nodes} * h.gpus_per_node > kMaxInt)
    throw InputError("hardware.nodes",
                     "is " + std::to_string(h.nodes) + ", and nodes x gpus_per_node = " +
                         std::to_string(int64_t{h.nodes} * h.gpus_per_node) + " ranks is too many",
                     "keep the world size below 2^31");

  h.device.gpus_per_node = h.gpus_per_node;

  // NOTE [Hardware overrides]: every profile figure may be given in "hardware" too (e.g.
  // "network_bandwidth": 12.5e9 for a slower fabric); it replaces the profile's value, is
  // validated as in a profile file, and its source becomes "set by the scenario".
  for (const auto& f : apply_hardware_figures(h.device, j, P, kOwnHardwareFields)) {
    h.overridden.push_back(f);
    h.device.source += " | " + f + ": set by the scenario";
  }
  check_hardware_profile(h.device, P);
  if (j.contains("host_threads_per_rank"))
    h.host_threads_per_rank =
        static_cast<int>(field_int(j, P, "host_threads_per_rank", 1, 1 << 16, "1"));
  if (j.contains("rank_speed"))
    h.rank_speed = parse_rank_speed(j.at("rank_speed"), h.nodes * h.gpus_per_node);

  h.memory_bytes = bytes_override(j, "memory", 1);
  h.non_allocator_bytes = bytes_override(j, "non_allocator", 0);
  if (h.memory_bytes) {  // NOTE [Two device totals]: the driver's reserve moves with the device
    const uint64_t reserve = h.device.memory_bytes - h.device.cuda_total_memory_bytes;
    h.device.memory_bytes = *h.memory_bytes;
    h.device.cuda_total_memory_bytes =
        *h.memory_bytes > reserve ? *h.memory_bytes - reserve : *h.memory_bytes;
  }
  if (h.non_allocator_bytes) h.device.non_allocator_bytes = *h.non_allocator_bytes;
  if (h.device.non_allocator_bytes >= h.device.memory_bytes) {
    const std::string where =
        h.non_allocator_bytes ? (j.contains("non_allocator_gib") ? "hardware.non_allocator_gib"
                                                                 : "hardware.non_allocator_bytes")
        : h.memory_bytes
            ? (j.contains("memory_gib") ? "hardware.memory_gib" : "hardware.memory_bytes")
            : "hardware.profile";
    throw InputError(
        where,
        "leaves no memory for the caching allocator: " + std::to_string(h.device.memory_bytes) +
            " bytes of device memory, " + std::to_string(h.device.non_allocator_bytes) +
            " bytes outside the allocator",
        "give more device memory or fewer non-allocator bytes");
  }

  if (j.contains("allocator")) {
    const json& a = j.at("allocator");
    const std::string A = "hardware.allocator";
    jr::require_object(a, A, "{\"expandable_segments\": true}");
    check_fields(a, A);
    if (a.contains("expandable_segments"))
      h.allocator.expandable_segments =
          jr::get_bool(a.at("expandable_segments"), A + ".expandable_segments");
    if (a.contains("max_split_size_mb")) {
      const int64_t mb = field_int(a, A, "max_split_size_mb", 0, kMaxSize, "512");
      // c10/cuda/CUDAAllocatorConfig.cpp: "max_split_size_mb too small, must be > 20".
      if (mb <= 20)
        throw InputError(A + ".max_split_size_mb", "is " + std::to_string(mb) + ", too small",
                         "PyTorch requires max_split_size_mb > 20; write e.g. 512, or omit it for "
                         "no limit");
      h.allocator.max_split_size_bytes = static_cast<uint64_t>(mb) * kMiB;
    }
  }
  h.allocator.capacity_bytes = h.device.memory_bytes - h.device.non_allocator_bytes;
  return h;
}

}  // namespace

namespace scenario_detail {

std::string resolve(const std::string& base_dir, const std::string& path) {
  const fs::path p(path);
  return p.is_absolute() ? p.string() : (fs::path(base_dir) / p).lexically_normal().string();
}

// Checks `obj`'s keys against the section's table. An unknown key gets, in order: the closest
// field of this section (a typo), the spelling this format uses for another tool's name, or the
// section the field belongs to.
void check_fields(const json& obj, const std::string& section) {
  jr::reject_unknown_fields(obj, section, fields(section), [&](const std::string& key) {
    for (const auto& a : kAliases)
      if (section == a.section && key == a.alias)
        return std::optional<std::string>("this format calls it '" + std::string(a.field) +
                                          "': write " + jr::child_path(section, a.field));
    if (section == "training.optimizer" && key == "betas")
      return std::optional<std::string>("write beta1 and beta2 as two numbers");
    for (const auto& [other, names] : kFields)
      if (other != section && std::find(names.begin(), names.end(), key) != names.end())
        return std::optional<std::string>("'" + key + "' belongs in " +
                                          (other.empty() ? "the top level" : other) +
                                          ": move it to " + jr::child_path(other, key));
    return std::optional<std::string>();
  });
}

int64_t field_int(const json& obj, const std::string& section, const char* key, int64_t min,
                  int64_t max, const std::string& example) {
  return jr::get_int(obj.at(key), jr::child_path(section, key), min, max, example);
}

}  // namespace scenario_detail

// ---------------------------------------------------------------- public API

int Scenario::world_size() const { return hardware.nodes * hardware.gpus_per_node; }

ReshardAfterForward FsdpOptions::reshard_for(const std::string& unit) const {
  auto it = per_unit_reshard.find(unit);
  return it == per_unit_reshard.end() ? reshard_after_forward : it->second;
}

MixedPrecisionPolicy FsdpOptions::mixed_precision_for(const std::string& unit) const {
  MixedPrecisionPolicy mp = mixed_precision;
  auto it = per_unit_mixed_precision.find(unit);
  if (it == per_unit_mixed_precision.end()) return mp;
  const MixedPrecisionOverride& o = it->second;
  if (o.param_dtype) mp.param_dtype = *o.param_dtype;
  if (o.reduce_dtype) mp.reduce_dtype = *o.reduce_dtype;
  if (o.output_dtype) mp.output_dtype = *o.output_dtype;
  if (o.cast_forward_inputs) mp.cast_forward_inputs = *o.cast_forward_inputs;
  return mp;
}

int FsdpOptions::mesh_size(const std::string& dim) const {
  for (size_t i = 0; i < mesh_dim_names.size() && i < mesh_shape.size(); ++i)
    if (mesh_dim_names[i] == dim) return mesh_shape[i];
  return 1;
}

int64_t TrainingOptions::batch_for(int rank) const {
  auto it = rank_batch.find(rank);
  return it == rank_batch.end() ? batch_per_rank : it->second;
}

bool TrainingOptions::uneven_batch() const {
  for (const auto& [rank, batch] : rank_batch)
    if (batch != batch_per_rank) return true;
  return false;
}

const std::map<std::string, std::vector<std::string>>& scenario_fields() { return kFields; }

const char* recompute_mode_name(RecomputeMode m) {
  switch (m) {
    case RecomputeMode::kNone: return "none";
    case RecomputeMode::kFull: return "full";
    case RecomputeMode::kSelectiveLayer: return "selective_layer";
    case RecomputeMode::kSelectiveOp: return "selective_op";
  }
  return "?";
}

const char* accumulation_sync_name(AccumulationSync a) {
  switch (a) {
    case AccumulationSync::kNone: return "none";
    case AccumulationSync::kReduceScatter: return "reduce_scatter";
    case AccumulationSync::kAll: return "all";
  }
  return "?";
}

const char* sharding_units_name(ShardingUnits u) {
  switch (u) {
    case ShardingUnits::kRoot: return "root";
    case ShardingUnits::kBlocks: return "blocks";
    case ShardingUnits::kEmbedBlocksHead: return "embed_blocks_head";
  }
  return "blocks";
}

Scenario parse_scenario(const json& j, const std::string& base_dir) {
  if (!j.is_object())
    throw InputError("scenario", "is " + jr::describe(j) + ", not a JSON object",
                     "a scenario is an object with \"model\", \"training\", \"fsdp\" and "
                     "\"hardware\" (docs/scenario-format.md)");
  check_fields(j, "");
  Scenario s;
  if (j.contains("$schema"))
    jr::get_string(j.at("$schema"), "$schema", "\"../docs/scenario.schema.json\"");
  if (j.contains("name")) {
    s.name = jr::get_string(j.at("name"), "name", "\"llama3.1-8b-fsdp8\"");
    if (s.name.empty())
      throw InputError("name", "is empty", "give a name or omit it (the file name is used)");
  }
  if (j.contains("description"))
    s.description =
        jr::get_string(j.at("description"), "description", "\"what this scenario shows\"");
  jr::require_field(j, "", "model",
                    "add \"model\": a zoo name such as \"llama3.1-8b\" (docs/scenario-format.md)");
  jr::require_field(j, "", "training", "add \"training\": {\"seq_len\": 4096}");
  jr::require_field(j, "", "hardware", "add \"hardware\": {\"profile\": \"h100-sxm-80gb\"}");
  s.model = parse_model(j.at("model"), base_dir);
  s.model_weights = parse_model_weights(j.at("model"), base_dir);
  s.training = parse_training(j.at("training"), s.model, base_dir);
  if (j.at("training").is_object() && j.at("training").contains("moe_routing"))
    apply_moe_routing(j.at("training").at("moe_routing"), s.model, s.training, base_dir);
  s.hardware = parse_hardware(j.at("hardware"), base_dir);
  s.fsdp =
      parse_fsdp(j.contains("fsdp") ? j.at("fsdp") : json::object(), s.hardware, s.model.n_layers,
                 s.model.arch == ModelArch::kLlama && s.model.tie_embeddings);
  if (j.contains("tensor_parallel"))
    s.tensor_parallel = parse_tensor_parallel(j.at("tensor_parallel"));
  if (s.training.accumulation_sync == AccumulationSync::kReduceScatter &&
      s.fsdp.mesh_size("replicate") == 1)
    throw InputError("training.grad_sync_during_accumulation",
                     "is \"reduce_scatter\" (set_requires_all_reduce(False)), which needs an HSDP "
                     "mesh, but fsdp.mesh has no replicate dim of size 2 or more",
                     "use \"all\" or \"none\", or an HSDP mesh such as \"mesh\": [2, 4]");
  const int tp = s.fsdp.mesh_size("tp");
  check_tensor_parallel(s.model, s.training.seq_len, tp, s.tensor_parallel.loss_parallel);
  s.context_parallel = parse_context_parallel(
      j.contains("context_parallel") ? &j.at("context_parallel") : nullptr, s);
  check_units_and_loss(s);
  check_async_tp(s);
  check_dtype_flow(s);
  check_moe(s);
  s.pipeline = parse_pipeline_parallel(
      j.contains("pipeline_parallel") ? &j.at("pipeline_parallel") : nullptr, s);

  if (j.contains("expert_parallel"))
    s.expert_parallel = scenario_detail::parse_expert_parallel(j.at("expert_parallel"), s);
  check_float8(s);
  // NOTE [Auxiliary load-balancing loss] in core/model/moe_aux_loss.h: over every MoE layer.
  if (s.pipeline.enabled() && s.model.moe.enabled() &&
      s.model.moe.load_balance == MoeLoadBalance::kAuxLoss)
    throw InputError("pipeline_parallel",
                     "is set with model.moe.load_balance \"aux_loss\", whose loss spans every "
                     "stage's MoE layers, which is not built yet",
                     "remove pipeline_parallel, or set model.moe.load_balance \"none\"");
  if (s.pipeline.enabled() && s.training.float8.recipe != Float8Recipe::kNone)
    throw InputError("training.float8",
                     "is set with a pp mesh dim, whose stages do not convert "
                     "their linears to float8 yet",
                     "remove training.float8, or the pp dim");
  scenario_detail::check_model_init(s);
  // NOTE [Forward methods] in core/fsdp/fully_shard.cc: model.generate() runs the root's body
  // without forward's hooks unless registered, so the root unit's own parameters (the
  // embedding, final norm and output unless fsdp.units "embed_blocks_head" gives them units of
  // their own) would be read sharded, where PyTorch fails on the first op mixing DTensor and
  // Tensor.
  if (s.training.generate_every > 0) {
    if (s.pipeline.enabled())
      throw InputError("training.generate_every",
                       "is set with a pp mesh dim, whose stages have no model.generate()",
                       "remove training.generate_every, or the pp dim");
    const bool root_owns_params = s.fsdp.units != ShardingUnits::kEmbedBlocksHead;
    const bool registered = !s.fsdp.forward_methods.empty();
    if (root_owns_params && !registered)
      throw InputError("training.generate_every",
                       "calls model.generate(), which FSDP2 does not hook: the root unit's "
                       "parameters (tok_embeddings, norm, output) would still be sharded",
                       "register it: \"fsdp\": {\"forward_methods\": [\"generate\"]} "
                       "(register_fsdp_forward_method(model, \"generate\"))");
  }
  check_frozen(s);  // lora_checks.h
  if (s.pipeline.enabled() && !s.training.reshard_after_backward_during_accumulation)
    throw InputError("training.reshard_after_backward_during_accumulation",
                     "is false with a pp mesh dim, whose schedule sets reshard_after_backward "
                     "itself (off until a stage's last microbatch)",
                     "remove it, or the pp dim");
  if (tp > 1 && !s.training.rank_batch.empty())
    throw InputError("training.rank_batch", "is set with tp " + std::to_string(tp),
                     "ranks of one tp group read the same batch: remove rank_batch or use tp 1");
  for (const auto& [rank, batch] : s.training.rank_batch)
    if (rank >= s.world_size())
      throw InputError("training.rank_batch",
                       "names rank " + std::to_string(rank) + " but the job has " +
                           std::to_string(s.world_size()) + " ranks",
                       "use ranks 0.." + std::to_string(s.world_size() - 1));
  check_recorded_routing(s);
  return s;
}

Scenario load_scenario_file(const std::string& path) {
  const json j = json_reader::read_json_file(path);
  const fs::path p(path);
  const std::string base = p.parent_path().empty() ? "." : p.parent_path().string();
  Scenario s = parse_scenario(j, base);
  if (s.name.empty()) s.name = p.stem().string();
  return s;
}

}  // namespace fullshard
