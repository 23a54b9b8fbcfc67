// The "fsdp" section (mesh, reshard_after_forward, mixed precision, offload, units, prefetch)
// and the "tensor_parallel" section of a scenario (docs/scenario-format.md).
#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/scenario_sections.h"

namespace fullshard::scenario_detail {
namespace {

namespace jr = json_reader;
using nlohmann::json;

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// NOTE [Mesh dims]: a mesh is [shard] (FSDP), [replicate, shard] (HSDP), [shard, tp] or
// [replicate, shard, tp] (FSDP / HSDP composed with tensor parallelism), laid out row-major as
// init_device_mesh does, so tp (the last dim) varies fastest and a tp group is consecutive
// ranks, inside a node when tp <= gpus_per_node. torchtitan names the dims dp_replicate,
// dp_shard and tp; both spellings are accepted and stored as replicate, shard and tp. A "pp"
// dim (pipeline parallelism, pipeline_options.h) comes first, outermost as torchtitan's
// ["pp", "dp_replicate", "dp_shard", "tp"]: a pp group is ranks a whole FSDP x tp mesh apart. A
// "cp" dim (context parallelism, context_parallel_options.h) sits between shard and tp, as in
// torchtitan's ["pp", "dp_replicate", "dp_shard", "cp", "tp"]; FSDP then shards over the
// flattened (shard, cp) group (torchtitan's dp_shard_cp).
void parse_mesh(const json& m, const HardwareOptions& hw, FsdpOptions& f) {
  const std::string P = "fsdp.mesh", S = "fsdp.mesh.shape", N = "fsdp.mesh.dim_names";
  const int64_t world = int64_t{hw.nodes} * hw.gpus_per_node;
  std::string examples = "[" + std::to_string(world) + "] for FSDP";
  if (hw.nodes > 1)
    examples +=
        " or [" + std::to_string(hw.nodes) + ", " + std::to_string(hw.gpus_per_node) + "] for HSDP";
  jr::require_object(m, P, "{\"shape\": [" + std::to_string(world) + "]}");
  check_fields(m, P);
  jr::require_field(m, P, "shape", "add \"shape\": " + examples);
  const json& s = m.at("shape");
  if (!s.is_array())
    throw InputError(S, "is " + jr::describe(s) + ", not an array",
                     "write a list of sizes, e.g. " + examples);
  // A 4-D or 5-D mesh needs its names (a leading pp, a cp dim); without them it is refused as
  // too many dims.
  if (s.empty() || s.size() > 5 || (s.size() >= 4 && !m.contains("dim_names")))
    throw InputError(
        S, "is " + jr::show(s) + ", a " + std::to_string(s.size()) + "-D mesh",
        "fullshard supports [shard] (FSDP), [replicate, shard] (HSDP), and either with a "
        "trailing tp dim (dim_names [\"shard\", \"tp\"] or [\"replicate\", \"shard\", \"tp\"]), "
        "optionally after a leading \"pp\" dim and with a \"cp\" dim after shard (then name every "
        "dim): write " +
            examples);
  std::vector<int64_t> shape;
  for (size_t i = 0; i < s.size(); ++i)
    shape.push_back(
        jr::get_int(s[i], jr::index_path(S, i), 1, kMaxRanksPerDim, std::to_string(world)));
  int64_t ranks = 1;
  for (int64_t d : shape) ranks *= d;
  if (ranks != world)
    throw InputError(S,
                     "mesh " + shape_text(shape) + " has " + std::to_string(ranks) +
                         " ranks but hardware has " + std::to_string(hw.nodes) + " nodes x " +
                         std::to_string(hw.gpus_per_node) + " GPUs = " + std::to_string(world),
                     "make the sizes multiply to " + std::to_string(world) + ", e.g. " + examples +
                         ", or change hardware.nodes / hardware.gpus_per_node");
  for (int64_t d : shape) f.mesh_shape.push_back(static_cast<int>(d));

  // Without dim_names a 1-D mesh is [shard] and a 2-D one [replicate, shard]; a tp dim is
  // always named.
  std::vector<std::string> expected = shape.size() == 1
                                          ? std::vector<std::string>{"shard"}
                                          : std::vector<std::string>{"replicate", "shard"};
  if (!m.contains("dim_names")) {
    if (shape.size() == 3)
      throw InputError(P, "has a 3-D shape " + shape_text(shape) + " without dim_names",
                       "add \"dim_names\": [\"dp_replicate\", \"dp_shard\", \"tp\"]");
    f.mesh_dim_names = expected;
    return;
  }
  const json& names = m.at("dim_names");
  const std::string fix =
      "name the dims [\"shard\"], [\"replicate\", \"shard\"], [\"shard\", \"tp\"] or "
      "[\"replicate\", \"shard\", \"tp\"] (torchtitan's dp_replicate / dp_shard also work), "
      "optionally after a leading \"pp\" and with a \"cp\" dim after \"shard\", one per dim of the "
      "shape";
  if (!names.is_array()) throw InputError(N, "is " + jr::describe(names) + ", not an array", fix);
  std::vector<std::string> given;
  for (size_t i = 0; i < names.size(); ++i) {
    std::string n = jr::get_string(names[i], jr::index_path(N, i), "\"shard\"");
    if (n == "dp_replicate") n = "replicate";
    if (n == "dp_shard") n = "shard";
    given.push_back(n);
  }
  if (names.size() != shape.size())
    throw InputError(N,
                     "is " + jr::show(names) + ": " + std::to_string(names.size()) +
                         (names.size() == 1 ? " name" : " names") + " for a " +
                         std::to_string(shape.size()) + "-D mesh",
                     fix);
  const std::vector<std::vector<std::string>> allowed = {
      {"shard"}, {"replicate", "shard"}, {"shard", "tp"}, {"replicate", "shard", "tp"}};
  std::vector<std::string> after_pp = given;  // the FSDP x tp dims after a leading pp
  if (!after_pp.empty() && after_pp.front() == "pp") after_pp.erase(after_pp.begin());
  // A cp dim right after shard (torchtitan's order); the rest is one of the meshes above.
  auto cp = std::find(after_pp.begin(), after_pp.end(), "cp");
  if (cp != after_pp.end() && cp != after_pp.begin() && *(cp - 1) == "shard") after_pp.erase(cp);
  if (std::find(allowed.begin(), allowed.end(), after_pp) == allowed.end())
    throw InputError(N, "is " + jr::show(names) + ", not a mesh fullshard builds", fix);
  f.mesh_dim_names = given;
}

ReshardAfterForward parse_reshard(const json& v, int shard_size, const std::string& P) {
  using Kind = ReshardAfterForward::Kind;
  ReshardAfterForward r;
  std::vector<std::string> divisors;
  for (int d = 1; d <= shard_size && divisors.size() < 16; ++d)
    if (shard_size % d == 0) divisors.push_back(std::to_string(d));
  const std::string S = std::to_string(shard_size);
  const std::string int_fix = "use a divisor of the shard size " + S + ": " +
                              jr::join(divisors, "") + " (1 acts as false, " + S +
                              " as true), or true / false / null";
  if (v.is_null()) return r;
  if (v.is_boolean()) {
    r.kind = v.get<bool>() ? Kind::kTrue : Kind::kFalse;
    return r;
  }
  if (!v.is_number())
    throw InputError(P, "is " + jr::describe(v),
                     "write true, false, null (the default: root false, other units true) or an "
                     "integer that divides the shard size " +
                         S + " (no quotes)");
  const int64_t n = jr::get_int(v, P, std::numeric_limits<int64_t>::min(),
                                std::numeric_limits<int64_t>::max(), "2");
  if (n < 1)
    throw InputError(P,
                     "is " + jr::show(v) +
                         "; an integer must be >= 1 (it is the size of the "
                         "group parameters stay sharded over after forward)",
                     "write false to keep parameters unsharded after forward, or " + int_fix);
  if (n > shard_size || shard_size % n != 0)
    throw InputError(P, "is " + jr::show(v) + ", which does not divide the shard-dim size " + S,
                     int_fix);
  r.kind = Kind::kInt;
  r.n = static_cast<int>(n);
  return r;
}

// NOTE [Per-unit options]: fully_shard takes reshard_after_forward per call, and torchtitan
// passes per-unit values. Its parallelize_llama of 2024 (pytorch/torchtitan@3f20451) gives
// every block `int(layer_id) < len(model.layers) - 1` ("do not reshard after forward for the
// last transformer block since FSDP would prefetch it immediately") and the root the default,
// which FSDP2 of that time forced to False for the root (fsdp2-reference.md,
// "reshard_after_forward"). fsdp.per_unit names a unit by its module fqn: "root" or
// "layers.N"; a negative N counts from the end, so "layers.-1" is the last block whatever the
// depth and one scenario fits 8B and 70B. Keys are stored resolved ("layers.31").
std::string resolve_unit(const std::string& key, int64_t n_layers, ShardingUnits units,
                         bool tied_head, const std::string& path) {
  const std::string fix = "name a unit \"root\" or \"layers.N\" with 0 <= N < " +
                          std::to_string(n_layers) + " (-1 is the last block)";
  if (key == "root") return key;
  // fsdp.units "embed_blocks_head": the embedding and fully_shard([norm, output]) are units;
  // "norm" and "output" name the same grouped unit (stored as "output"). With tied embeddings
  // the three modules are one unit, fully_shard([tok_embeddings, norm, output]) (NOTE [Tied
  // embeddings unit] in scenario_checks.cc): each key names it, stored as "output" too.
  if (units == ShardingUnits::kEmbedBlocksHead) {
    if (key == "tok_embeddings") return tied_head ? "output" : key;
    if (key == "norm" || key == "output") return "output";
  }
  const std::string prefix = "layers.";
  if (key.rfind(prefix, 0) != 0) {
    std::string why = "is not an FSDP unit";
    if (key == "tok_embeddings" || key == "output" || key == "norm" || key == "wte" ||
        key == "wpe" || key == "ln_f" || key == "lm_head")
      why =
          "is not a unit of its own: the embeddings, final norm and output belong to the root unit";
    throw InputError(
        path, why,
        units == ShardingUnits::kEmbedBlocksHead
            ? fix + (tied_head ? ", or \"output\" (the tied [tok_embeddings, norm, output] unit)"
                               : ", \"tok_embeddings\", or \"output\" (the [norm, output] unit)")
            : fix +
                  "; fsdp.units \"embed_blocks_head\" makes the embedding and [norm, output] "
                  "units");
  }
  const std::string num = key.substr(prefix.size());
  size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(num, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (num.empty() || used != num.size()) throw InputError(path, "is not an FSDP unit", fix);
  if (n < -n_layers || n >= n_layers)
    throw InputError(
        path, "names block " + num + " of a model with " + std::to_string(n_layers) + " blocks",
        fix);
  if (units == ShardingUnits::kRoot)
    throw InputError(path, "names a block, but fsdp.units is \"root\" (one unit: the whole model)",
                     "remove it, or set fsdp.units to \"blocks\"");
  return prefix + std::to_string(n < 0 ? n + n_layers : n);
}

std::optional<DType> parse_dtype(const json& v, const std::string& path);

void parse_per_unit(const json& u, int shard_size, int64_t n_layers, bool tied_head,
                    FsdpOptions& f) {
  const std::string P = "fsdp.per_unit";
  jr::require_object(u, P, "{\"layers.-1\": {\"reshard_after_forward\": false}}");
  std::map<std::string, std::string> key_of;
  for (const auto& [key, v] : u.items()) {
    const std::string K = jr::child_path(P, key);
    const std::string unit = resolve_unit(key, n_layers, f.units, tied_head, K);
    if (key_of.count(unit))
      throw InputError(K, "names the same unit as \"" + key_of[unit] + "\" (" + unit + ")",
                       "keep one of the two");
    key_of[unit] = key;
    jr::require_object(v, K, "{\"reshard_after_forward\": false}");
    jr::reject_unknown_fields(v, K,
                              {"reshard_after_forward", "mixed_precision", "forward_prefetch",
                               "backward_prefetch", "unshard_in_backward"});
    if (v.empty())
      throw InputError(K, "sets nothing",
                       "add \"reshard_after_forward\", \"mixed_precision\", \"forward_prefetch\", "
                       "\"backward_prefetch\" or \"unshard_in_backward\" (or remove the unit)");
    if (v.contains("unshard_in_backward") &&
        !jr::get_bool(v.at("unshard_in_backward"), jr::child_path(K, "unshard_in_backward"))) {
      // Only a unit whose backward reads none of its parameters may skip the all-gather: the
      // embedding's own unit (its backward scatters the output gradient by token id).
      if (unit != "tok_embeddings")
        throw InputError(jr::child_path(K, "unshard_in_backward"),
                         "is false for unit " + unit +
                             ", whose backward reads its parameters (a linear or norm weight): "
                             "FSDP2 would compute with freed storage",
                         "set it only on \"tok_embeddings\" (fsdp.units \"embed_blocks_head\", "
                         "untied embeddings)");
      f.no_unshard_in_backward.push_back(unit);
    }
    // set_modules_to_forward_prefetch / set_modules_to_backward_prefetch with named units.
    for (const char* which : {"forward_prefetch", "backward_prefetch"}) {
      if (!v.contains(which)) continue;
      const std::string L = jr::child_path(K, which);
      const json& list = v.at(which);
      if (!list.is_array())
        throw InputError(L, "is " + jr::describe(list) + ", not a list of units",
                         "write the units to prefetch, e.g. [\"layers.2\", \"layers.3\"]");
      std::vector<std::string> units;
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string at = jr::index_path(L, i);
        if (!list[i].is_string())
          throw InputError(at, "is " + jr::describe(list[i]) + ", not a unit name",
                           "write a unit such as \"layers.2\" or \"root\"");
        const std::string t =
            resolve_unit(list[i].get<std::string>(), n_layers, f.units, tied_head, at);
        if (t == unit)
          throw InputError(at, "names the unit itself (" + unit + ")",
                           "name other units: a unit is unsharded before it prefetches");
        if (std::find(units.begin(), units.end(), t) != units.end())
          throw InputError(at, "names " + t + " twice", "name each unit once");
        units.push_back(t);
      }
      (std::string(which) == "forward_prefetch" ? f.per_unit_forward_prefetch
                                                : f.per_unit_backward_prefetch)[unit] = units;
    }
    if (v.contains("reshard_after_forward"))
      f.per_unit_reshard[unit] = parse_reshard(v.at("reshard_after_forward"), shard_size,
                                               jr::child_path(K, "reshard_after_forward"));
    if (v.contains("mixed_precision")) {
      const json& m = v.at("mixed_precision");
      const std::string M = jr::child_path(K, "mixed_precision");
      jr::require_object(m, M, "{\"param_dtype\": \"fp32\"}");
      jr::reject_unknown_fields(
          m, M, {"param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs"});
      FsdpOptions::MixedPrecisionOverride o;
      if (m.contains("param_dtype"))
        o.param_dtype = parse_dtype(m.at("param_dtype"), M + ".param_dtype");
      if (m.contains("reduce_dtype"))
        o.reduce_dtype = parse_dtype(m.at("reduce_dtype"), M + ".reduce_dtype");
      if (m.contains("output_dtype"))
        o.output_dtype = parse_dtype(m.at("output_dtype"), M + ".output_dtype");
      if (m.contains("cast_forward_inputs"))
        o.cast_forward_inputs =
            jr::get_bool(m.at("cast_forward_inputs"), M + ".cast_forward_inputs");
      f.per_unit_mixed_precision[unit] = o;
    }
  }
}

std::optional<DType> parse_dtype(const json& v, const std::string& path) {
  if (v.is_null()) return std::nullopt;
  const std::vector<std::string> names = {"fp32", "bf16", "fp16"};
  const std::string fix = "write \"fp32\", \"bf16\", \"fp16\" or null (no cast)";
  if (!v.is_string()) throw InputError(path, "is " + jr::describe(v), fix);
  const std::string s = v.get<std::string>();
  if (s == "fp32") return DType::kFloat32;
  if (s == "bf16") return DType::kBFloat16;
  if (s == "fp16") return DType::kFloat16;
  // torch spellings ("bfloat16", "torch.float16", "half"): point to ours.
  std::string bare = s.rfind("torch.", 0) == 0 ? s.substr(6) : s;
  if (bare == "half") bare = "float16";
  if (bare == "float") bare = "float32";
  if (auto d = parse_float_dtype(bare))
    throw InputError(path, "is \"" + s + "\", not a dtype name this format uses",
                     "write \"" + std::string(dtype_name(*d)) + "\"");
  if (auto near = jr::closest(s, names))
    throw InputError(path, "is \"" + s + "\", an unknown dtype",
                     "did you mean \"" + *near + "\"? " + fix);
  throw InputError(path, "is \"" + s + "\", an unknown dtype", fix);
}

}  // namespace

// fsdp.unshard {"modules": [...], "async_op": bool}: the loop's FSDPModule.unshard calls before
// each micro-batch (NOTE [Async unshard] in core/fsdp/fsdp_param_group.cc). Units are named as
// fsdp.per_unit names them.
void parse_unshard(const json& u, int64_t n_layers, bool tied_head, FsdpOptions& f) {
  const std::string P = "fsdp.unshard";
  const std::string example = "{\"modules\": [\"root\", \"layers.0\"], \"async_op\": true}";
  jr::require_object(u, P, example);
  check_fields(u, P);
  if (std::find(f.mesh_dim_names.begin(), f.mesh_dim_names.end(), "pp") != f.mesh_dim_names.end())
    throw InputError(P, "is set with a pp mesh dim, whose stages' loop is not built to call it",
                     "remove fsdp.unshard, or the pp dim");
  if (!u.contains("modules"))
    throw InputError(P + ".modules", "is missing", "write the units to unshard, e.g. " + example);
  const json& list = u.at("modules");
  const std::string L = P + ".modules";
  if (!list.is_array() || list.empty())
    throw InputError(L, "is " + jr::describe(list) + ", not a non-empty list of units",
                     "write the units to unshard, e.g. [\"root\", \"layers.0\"]");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = jr::index_path(L, i);
    if (!list[i].is_string())
      throw InputError(at, "is " + jr::describe(list[i]) + ", not a unit name",
                       "write a unit such as \"root\" or \"layers.0\"");
    const std::string t = resolve_unit(list[i].get<std::string>(), n_layers, f.units, tied_head, at);
    if (std::find(f.unshard_modules.begin(), f.unshard_modules.end(), t) != f.unshard_modules.end())
      throw InputError(at, "names " + t + " twice", "name each unit once");
    f.unshard_modules.push_back(t);
  }
  if (u.contains("async_op")) f.unshard_async_op = jr::get_bool(u.at("async_op"), P + ".async_op");
}

FsdpOptions parse_fsdp(const json& j, const HardwareOptions& hw, int64_t n_layers, bool tied_head) {
  const std::string P = "fsdp";
  FsdpOptions f;
  jr::require_object(j, P, "{\"reshard_after_forward\": true}");
  check_fields(j, P);
  if (j.contains("mesh")) {
    parse_mesh(j.at("mesh"), hw, f);
  } else {
    f.mesh_shape = {hw.nodes * hw.gpus_per_node};
    f.mesh_dim_names = {"shard"};
  }
  if (j.contains("reshard_after_forward"))
    f.reshard_after_forward = parse_reshard(j.at("reshard_after_forward"), f.fsdp_shard_size(),
                                            "fsdp.reshard_after_forward");
  if (j.contains("mixed_precision")) {
    const json& m = j.at("mixed_precision");
    const std::string M = "fsdp.mixed_precision";
    jr::require_object(m, M, "{\"param_dtype\": \"bf16\", \"reduce_dtype\": \"fp32\"}");
    check_fields(m, M);
    auto& mp = f.mixed_precision;
    if (m.contains("param_dtype"))
      mp.param_dtype = parse_dtype(m.at("param_dtype"), M + ".param_dtype");
    if (m.contains("reduce_dtype"))
      mp.reduce_dtype = parse_dtype(m.at("reduce_dtype"), M + ".reduce_dtype");
    if (m.contains("output_dtype"))
      mp.output_dtype = parse_dtype(m.at("output_dtype"), M + ".output_dtype");
    if (m.contains("cast_forward_inputs"))
      mp.cast_forward_inputs =
          jr::get_bool(m.at("cast_forward_inputs"), M + ".cast_forward_inputs");
  }
  if (j.contains("cpu_offload")) {
    const json& c = j.at("cpu_offload");
    const std::string C = "fsdp.cpu_offload";
    if (c.is_boolean()) {
      f.cpu_offload = c.get<bool>();
    } else if (c.is_object()) {
      check_fields(c, C);
      f.cpu_offload = true;
      if (c.contains("pin_memory"))
        f.pin_memory = jr::get_bool(c.at("pin_memory"), C + ".pin_memory");
    } else {
      throw InputError(C, "is " + jr::describe(c), "write true, false or {\"pin_memory\": false}");
    }
  }
  if (j.contains("units")) {
    const std::string u =
        jr::get_choice(j.at("units"), "fsdp.units", {"blocks", "root", "embed_blocks_head"});
    f.units = u == "root"     ? ShardingUnits::kRoot
              : u == "blocks" ? ShardingUnits::kBlocks
                              : ShardingUnits::kEmbedBlocksHead;
  }
  if (j.contains("forward_prefetch"))
    f.forward_prefetch = static_cast<int>(field_int(j, P, "forward_prefetch", 0, kMaxInt, "1"));
  if (j.contains("backward_prefetch"))
    f.backward_prefetch =
        static_cast<int>(field_int(j, P, "backward_prefetch", 1, kMaxInt,
                                   "1 (FSDP2 always prefetches at least one unit in backward)"));
  if (j.contains("gradient_divide_factor"))
    f.gradient_divide_factor =
        jr::get_number(j.at("gradient_divide_factor"), P + ".gradient_divide_factor", 0, false,
                       1e300, true, "1.0 (torchtitan: the loss is already divided by the tokens)");
  if (j.contains("force_sum_reduction_for_comms"))
    f.force_sum_reduction_for_comms =
        jr::get_bool(j.at("force_sum_reduction_for_comms"), P + ".force_sum_reduction_for_comms");
  if (j.contains("post_optim_event"))
    f.post_optim_event = jr::get_bool(j.at("post_optim_event"), P + ".post_optim_event");
  if (j.contains("unshard_async_op"))
    f.hooks_unshard_async_op = jr::get_bool(j.at("unshard_async_op"), P + ".unshard_async_op");
  if (j.contains("ignored_params")) f.ignored_params = parse_ignored_params(j.at("ignored_params"));
  if (j.contains("per_unit"))
    parse_per_unit(j.at("per_unit"), f.fsdp_shard_size(), n_layers, tied_head, f);
  if (j.contains("unshard")) parse_unshard(j.at("unshard"), n_layers, tied_head, f);
  if (j.contains("forward_methods")) {
    // register_fsdp_forward_method(model, name): the model has one method other than forward.
    const json& list = j.at("forward_methods");
    const std::string L = P + ".forward_methods";
    if (!list.is_array())
      throw InputError(L, "is " + jr::describe(list) + ", not a list of method names",
                       "write [\"generate\"]");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string at = jr::index_path(L, i);
      if (!list[i].is_string() || list[i].get<std::string>() != "generate")
        throw InputError(at, "is " + jr::show(list[i]) + ", not a method of the model",
                         "write \"generate\" (the model's one method other than forward)");
      if (std::find(f.forward_methods.begin(), f.forward_methods.end(), "generate") !=
          f.forward_methods.end())
        throw InputError(at, "names \"generate\" twice", "name each method once");
      f.forward_methods.push_back("generate");
    }
  }
  return f;
}

TensorParallelOptions parse_tensor_parallel(const json& t) {
  const std::string T = "tensor_parallel";
  TensorParallelOptions o;
  jr::require_object(t, T, "{\"loss_parallel\": false}");
  check_fields(t, T);
  if (t.contains("loss_parallel"))
    o.loss_parallel = jr::get_bool(t.at("loss_parallel"), T + ".loss_parallel");
  if (t.contains("async")) o.async = jr::get_bool(t.at("async"), T + ".async");
  return o;
}

}  // namespace fullshard::scenario_detail
