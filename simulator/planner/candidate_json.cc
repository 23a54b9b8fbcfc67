#include "simulator/planner/candidate_json.h"

#include <filesystem>
#include <iterator>
#include <optional>

#include "core/model/implementation.h"

namespace fullshard::planner {

namespace fs = std::filesystem;
using nlohmann::json;
using Kind = ReshardAfterForward::Kind;

namespace {

// NOTE [Chunked loss candidates] in search_space.cc, on the scenario's JSON: the chunk count
// that divides the candidate's tokens, and the root kept unsharded when it owns the output.
void adjust_chunked_loss(json& j, const Candidate& c) {
  if (!j.contains("model") || !j["model"].is_object() || !j["model"].contains("implementation"))
    return;
  json& impl = j["model"]["implementation"];
  std::optional<ModelImplementation> m;
  if (impl.is_string()) {
    m = find_implementation_preset(impl.get<std::string>());
    if (m) impl = json{{"preset", impl.get<std::string>()}};
  } else if (impl.is_object()) {
    m = find_implementation_preset(impl.value("preset", std::string("fullshard")));
    if (m && impl.contains("loss") && impl["loss"].is_string())
      set_implementation_value(*m, "loss", impl["loss"].get<std::string>());
    if (m && impl.contains("loss_chunks") && impl["loss_chunks"].is_number_integer())
      m->loss_chunks = impl["loss_chunks"].get<int>();
  }
  if (!m || m->loss != LossImpl::kChunked) return;
  const int64_t tokens = c.micro_batch * j["training"].value("seq_len", int64_t{1}) / c.cp;
  int n = m->loss_chunks;
  while (n > 1 && tokens % n != 0) --n;
  if (n != m->loss_chunks) impl["loss_chunks"] = n;
  json& f = j["fsdp"];
  if (f.value("units", std::string("blocks")) != "embed_blocks_head") {
    if (!f.contains("per_unit") || !f["per_unit"].is_object()) f["per_unit"] = json::object();
    f["per_unit"]["root"] = {{"reshard_after_forward", false}};
  }
}

}  // namespace

json candidate_scenario_json(const json& base, const Candidate& c, const std::string& name,
                             const std::string& description) {
  json j = base;
  j.erase("$schema");
  j["name"] = name;
  j["description"] = description;
  json& t = j["training"];
  t["batch_per_rank"] = c.micro_batch;
  t["grad_accum_steps"] = c.grad_accum;
  if (!c.hsdp() && t.value("grad_sync_during_accumulation", "") == "reduce_scatter")
    t["grad_sync_during_accumulation"] = "all";  // as candidate_scenario()
  if (c.ac.mode == RecomputeMode::kSelectiveLayer)
    t["activation_checkpointing"] = {{"mode", "selective_layer"}, {"every", c.ac.every}};
  else
    t["activation_checkpointing"] = recompute_mode_name(c.ac.mode);

  if (!j.contains("fsdp") || !j["fsdp"].is_object()) j["fsdp"] = json::object();
  json& f = j["fsdp"];
  f["mesh"] = c.hsdp()
                  ? json{{"shape", {c.replicate, c.shard}}, {"dim_names", {"replicate", "shard"}}}
                  : json{{"shape", {c.shard}}, {"dim_names", {"shard"}}};
  if (c.cp > 1) {  // NOTE [Context-parallel candidates] in search_space.cc
    f["mesh"]["shape"].push_back(c.cp);
    f["mesh"]["dim_names"].push_back("cp");
    j["context_parallel"] = {{"rotate_method", cp_rotate_method_name(c.cp_rotate)}};
  } else {
    j.erase("context_parallel");
  }
  if (c.tp > 1) {
    f["mesh"]["shape"].push_back(c.tp);
    f["mesh"]["dim_names"].push_back("tp");
  }
  if (c.ep > 1) {  // the base's other expert_parallel fields (receive_buffers) stay
    if (!j.contains("expert_parallel") || !j["expert_parallel"].is_object())
      j["expert_parallel"] = nlohmann::json::object();
    j["expert_parallel"]["degree"] = c.ep;
  } else
    j.erase("expert_parallel");
  if (c.pp > 1) {  // NOTE [Pipeline candidates] in search_space.cc
    f["mesh"]["shape"].insert(f["mesh"]["shape"].begin(), c.pp);
    f["mesh"]["dim_names"].insert(f["mesh"]["dim_names"].begin(), "pp");
    j["pipeline_parallel"] = {{"schedule", pipeline_schedule_name(c.pp_schedule)},
                              {"microbatch_size", c.micro_batch}};
    t["batch_per_rank"] = c.micro_batch * c.grad_accum;
    t["grad_accum_steps"] = 1;
  } else {
    j.erase("pipeline_parallel");
  }
  // As candidate_scenario() applies a scenario's tensor_parallel.async.
  if (j.contains("tensor_parallel") && j["tensor_parallel"].is_object() &&
      j["tensor_parallel"].contains("async") &&
      (c.tp <= 1 || c.ac.mode == RecomputeMode::kSelectiveOp))
    j["tensor_parallel"]["async"] = false;
  switch (c.reshard.kind) {
    case Kind::kDefault: f["reshard_after_forward"] = nullptr; break;
    case Kind::kTrue: f["reshard_after_forward"] = true; break;
    case Kind::kFalse: f["reshard_after_forward"] = false; break;
    case Kind::kInt: f["reshard_after_forward"] = c.reshard.n; break;
  }
  if (f.contains("per_unit") && f["per_unit"].is_object()) {  // as candidate_scenario() keeps them
    json& u = f["per_unit"];
    for (auto it = u.begin(); it != u.end();) {
      const json* v = it->is_object() && it->contains("reshard_after_forward")
                          ? &(*it)["reshard_after_forward"]
                          : nullptr;
      const bool drop = v && v->is_number_integer() && v->get<int64_t>() > 0 &&
                        c.shard * c.cp % v->get<int64_t>() != 0;
      it = drop ? u.erase(it) : std::next(it);
    }
    if (u.empty()) f.erase("per_unit");
  }
  if (!f.contains("mixed_precision") || !f["mixed_precision"].is_object())
    f["mixed_precision"] = json::object();
  json& mp = f["mixed_precision"];
  switch (c.precision) {
    case Precision::kFp32:
      mp["param_dtype"] = nullptr;
      mp["reduce_dtype"] = nullptr;
      break;
    case Precision::kBf16Fp32Reduce:
      mp["param_dtype"] = "bf16";
      mp["reduce_dtype"] = "fp32";
      break;
    case Precision::kBf16:
      mp["param_dtype"] = "bf16";
      mp["reduce_dtype"] = "bf16";
      break;
  }
  // Keep an existing {"pin_memory": false} when offloading; otherwise a plain bool.
  const bool unpinned = f.contains("cpu_offload") && f["cpu_offload"].is_object() &&
                        f["cpu_offload"].value("pin_memory", true) == false;
  f["cpu_offload"] =
      c.cpu_offload ? (unpinned ? json{{"pin_memory", false}} : json(true)) : json(false);

  json& h = j["hardware"];
  if (!h.contains("allocator") || !h["allocator"].is_object()) h["allocator"] = json::object();
  h["allocator"]["expandable_segments"] = c.expandable_segments;
  if (c.float8 != Float8Choice::kOff) {  // as candidate_scenario() (NOTE [Float8 candidates])
    const bool ag = c.float8 == Float8Choice::kTensorwiseAllGather;
    const char* recipe = c.float8 == Float8Choice::kRowwise           ? "rowwise"
                         : c.float8 == Float8Choice::kRowwiseWithGwHp ? "rowwise_with_gw_hp"
                                                                      : "tensorwise";
    t["float8"] = {{"recipe", recipe},
                   {"enable_fsdp_float8_all_gather", ag},
                   {"precompute_float8_dynamic_scale_for_fsdp", ag},
                   {"filter_fqns", {"output"}}};
  }
  adjust_chunked_loss(j, c);
  return j;
}

json absolutize_paths(json j, const std::string& base_dir) {
  auto fix = [&](json& v) {
    if (!v.is_string()) return;
    fs::path p(v.get<std::string>());
    if (!p.is_absolute()) v = fs::absolute(fs::path(base_dir) / p).lexically_normal().string();
  };
  if (j.is_object() && j.contains("model") && j["model"].is_object() &&
      j["model"].contains("hf_config"))
    fix(j["model"]["hf_config"]);
  if (j.is_object() && j.contains("hardware") && j["hardware"].is_object() &&
      j["hardware"].contains("profile")) {
    json& p = j["hardware"]["profile"];
    if (p.is_string()) {
      const std::string s = p.get<std::string>();
      if (s.size() > 5 && s.substr(s.size() - 5) == ".json") fix(p);
    }
  }
  return j;
}

}  // namespace fullshard::planner
