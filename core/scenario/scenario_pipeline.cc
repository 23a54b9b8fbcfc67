// The "pipeline_parallel" section of a scenario (docs/scenario-format.md, "Pipeline
// parallelism") and what it resolves to: the stages each pp rank builds and the microbatches.
//
// NOTE [What pipeline parallelism composes with]: the simulator runs torchtitan's pipeline_llm
// (pytorch/torchtitan@b5bcd76c6): an untied Llama split into stages by layer, FSDP2 and tp inside
// each stage, MoE layers with expert parallelism carved out of each stage's data-parallel ranks
// (NOTE [MoE in pipeline stages] in core/train/pipeline_program.cc), all seven schedules (the
// zero-bubble ones' split I / W backward: check_split_backward, over checkpointed blocks too,
// NOTE [Split backward of a checkpointed block] in core/model/autograd.cc; their crossing sends
// and recvs run in PyTorch's lowered order, NOTE [Lowered send and recv order] in
// core/pipeline/pipeline_lowering.h). Refused, each naming its field: gradient accumulation,
// an uneven batch, the chunked loss, GPT-2 and tied embeddings (torchtitan splits a Llama
// decoder; a tied weight would live on two stages), and checkpoint saves.
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/pipeline_resolve.h"
#include "core/scenario/scenario_sections.h"

namespace fullshard::scenario_detail {
namespace {

namespace jr = json_reader;
using nlohmann::json;

const std::string kP = "pipeline_parallel";
const std::string kFqns = "pipeline_parallel.module_fqns_per_model_part";

// module_fqns_per_model_part: each part a list of "tok_embeddings", "layers.N", "norm",
// "output", the layers of all parts in order, each module once, the embedding in the first
// part and the norm and output in the last (torchtitan's _pipeline_module_split keeps a part's
// modules and runs them in the Decoder's order).
std::vector<PipelineStageModules> parse_fqns(const json& v, int64_t n_layers) {
  const std::string example =
      "[[\"tok_embeddings\", \"layers.0\"], [\"layers.1\", \"norm\", "
      "\"output\"]]";
  if (!v.is_array() || v.empty())
    throw InputError(kFqns, "is " + jr::describe(v), "write a list of parts, e.g. " + example);
  std::vector<PipelineStageModules> stages;
  int64_t next_layer = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string P = jr::index_path(kFqns, i);
    if (!v[i].is_array())
      throw InputError(P, "is " + jr::describe(v[i]), "write a list of module names");
    PipelineStageModules st;
    st.first_layer = static_cast<int>(next_layer);
    bool norm = false;
    for (size_t k = 0; k < v[i].size(); ++k) {
      const std::string F = jr::index_path(P, k);
      const std::string name = jr::get_string(v[i][k], F, "\"layers.0\"");
      const std::string fix =
          "name \"tok_embeddings\" (first part), \"layers.N\" in order, "
          "\"norm\" and \"output\" (last part)";
      if (name == "tok_embeddings") {
        if (i != 0 || st.embeddings || st.num_layers > 0)
          throw InputError(F, "places tok_embeddings after other modules", fix);
        st.embeddings = true;
      } else if (name == "norm" || name == "output") {
        if (i + 1 != v.size())
          throw InputError(F, "places " + name + " in a part before the last", fix);
        if ((name == "norm" && norm) || (name == "output" && st.output) ||
            (name == "norm" && st.output))
          throw InputError(F, "repeats or misorders " + name, fix);
        (name == "norm" ? norm : st.output) = true;
      } else if (name.rfind("layers.", 0) == 0 && name.size() > 7 &&
                 name.find_first_not_of("0123456789", 7) == std::string::npos && name.size() < 17) {
        const int64_t n = std::stoll(name.substr(7));
        if (n != next_layer || norm || st.output)
          throw InputError(
              F, "is " + name + " where layers." + std::to_string(next_layer) + " comes next",
              "list each layer once, in order (layers 0 to " + std::to_string(n_layers - 1) + ")");
        if (n >= n_layers)
          throw InputError(
              F, "names " + name + " of a model with " + std::to_string(n_layers) + " layers", fix);
        ++next_layer;
        ++st.num_layers;
      } else {
        throw InputError(F, "is \"" + name + "\", not a module of the Llama decoder", fix);
      }
    }
    if (i + 1 == v.size() && !(norm && st.output))
      throw InputError(P, "(the last part) lacks \"norm\" or \"output\"", "add both to it");
    if (i == 0 && !st.embeddings)
      throw InputError(P, "(the first part) lacks \"tok_embeddings\"", "add it first");
    stages.push_back(st);
  }
  if (next_layer != n_layers)
    throw InputError(kFqns,
                     "places " + std::to_string(next_layer) + " of the model's " +
                         std::to_string(n_layers) + " layers",
                     "list every layer once, in order");
  return stages;
}

bool pipeline_splits_backward(PipelineScheduleKind k) {
  return k == PipelineScheduleKind::kInterleavedZeroBubble ||
         k == PipelineScheduleKind::kZBVZeroBubble || k == PipelineScheduleKind::kDualPipeV;
}

// NOTE [Split backward] (core/model/autograd.h): the ops whose weight gradients I and W run
// apart are the linear, the norms' weights, the embedding and the experts' grouped GEMM (inside
// a block checkpointed whole too); the others compute theirs inside one backward, so a
// zero-bubble schedule refuses what records them, naming the field.
void check_split_backward(const Scenario& s, PipelineScheduleKind k) {
  const std::string what = std::string("with the ") + pipeline_schedule_name(k) +
                           " schedule, whose split input / weight backward";
  const std::string fix = "remove it, or use \"1F1B\", \"Interleaved1F1B\", \"GPipe\" or "
                          "\"LoopedBFS\"";
  if (s.fsdp.mesh_size("tp") > 1)
    throw InputError("fsdp.mesh.dim_names",
                     "has a tp dim " + what + " the tensor-parallel linears do not split yet", fix);
  if (s.model.lora.enabled())
    throw InputError("model.lora", "is set " + what + " the adapters do not split yet", fix);
  if (s.training.float8.enabled())
    throw InputError("training.float8", "is set " + what + " float8 linears do not split yet",
                     fix);
  if (s.model.implementation.compile)
    throw InputError("model.implementation.compile",
                     "is true " + what + " the compiled blocks do not split yet", fix);
  // Blocks checkpointed whole split (NOTE [Split backward of a checkpointed block] in
  // core/model/autograd.cc); op-level SAC does not: W recomputes the block a second time and
  // PyTorch's _CachedTorchDispatchMode finds its cache popped by I ("Trying to backward an extra
  // time").
  if (s.training.activation_checkpointing.mode == RecomputeMode::kSelectiveOp)
    throw InputError("training.activation_checkpointing",
                     "is \"selective_op\" " + what +
                         " recomputes each block again at W, after op-level SAC's cache was "
                         "spent at I (PyTorch raises \"Trying to backward an extra time\")",
                     "use \"full\" or {\"mode\": \"selective_layer\", \"every\": k}, or the "
                     "\"1F1B\", \"Interleaved1F1B\", \"GPipe\" or \"LoopedBFS\" schedule");
}

}  // namespace

PipelineParallelOptions parse_pipeline_parallel(const json* j, const Scenario& s) {
  PipelineParallelOptions o;
  o.degree = s.fsdp.mesh_size("pp");
  if (!o.enabled()) {
    if (j)
      throw InputError(kP, "is set, but fsdp.mesh has no \"pp\" dim of size 2 or more",
                       "add a leading pp dim, e.g. \"mesh\": {\"shape\": [2, 4], \"dim_names\": "
                       "[\"pp\", \"dp_shard\"]}, or remove pipeline_parallel");
    return o;
  }
  const json empty = json::object();
  const json& p = j ? *j : empty;
  jr::require_object(p, kP, "{\"schedule\": \"1F1B\", \"microbatch_size\": 1}");
  check_fields(p, kP);
  if (p.contains("schedule"))
    o.schedule = parse_pipeline_schedule(
        jr::get_string(p.at("schedule"), kP + ".schedule", "\"1F1B\""), kP + ".schedule");
  if (p.contains("microbatch_size"))
    o.microbatch_size = field_int(p, kP, "microbatch_size", 1, kMaxSize, "1");
  if (p.contains("layers_per_stage"))
    o.layers_per_stage = static_cast<int>(field_int(p, kP, "layers_per_stage", 1, kMaxInt, "4"));
  if (p.contains("first_stage_less_layers"))
    o.first_stage_less_layers =
        static_cast<int>(field_int(p, kP, "first_stage_less_layers", 0, kMaxInt, "1"));
  if (p.contains("last_stage_less_layers"))
    o.last_stage_less_layers =
        static_cast<int>(field_int(p, kP, "last_stage_less_layers", 0, kMaxInt, "1"));

  // NOTE [What pipeline parallelism composes with] (above).
  const ModelConfig& m = s.model;
  if (pipeline_splits_backward(o.schedule)) check_split_backward(s, o.schedule);
  if (m.arch != ModelArch::kLlama || m.tie_embeddings)
    throw InputError("model",
                     m.arch != ModelArch::kLlama
                         ? "is a GPT-2, but pipeline parallelism splits a Llama decoder"
                         : "ties its embeddings, which would put one weight on two stages",
                     "use an untied Llama model, or remove the pp dim");
  if (m.implementation.loss == LossImpl::kChunked)
    throw InputError("model.implementation.loss",
                     "is \"chunked\", which the last pipeline stage does not run yet",
                     "use another loss, or remove the pp dim");
  if (m.implementation.loss_normalization == LossNormalization::kGlobalValidTokens)
    throw InputError("model.implementation.loss_normalization",
                     "is \"global_valid_tokens\", which the pipeline stages do not scale yet",
                     "use \"mean\", or remove the pp dim");
  if (s.training.grad_accum_steps > 1)
    throw InputError(
        "training.grad_accum_steps",
        "is " + std::to_string(s.training.grad_accum_steps) + " with pipeline parallelism",
        "use microbatches instead: raise training.batch_per_rank (one pipeline "
        "step runs batch_per_rank / microbatch_size microbatches)");
  if (s.training.uneven_batch())
    throw InputError("training.rank_batch", "is set with pipeline parallelism",
                     "every pp rank runs the same microbatches: remove rank_batch");
  if (s.training.checkpoint.every > 0)
    throw InputError("training.checkpoint.every", "is set with pipeline parallelism",
                     "checkpoint saves of pipeline stages are not simulated yet: remove it");
  if (s.training.batch_per_rank % o.microbatch_size != 0)
    throw InputError(kP + ".microbatch_size",
                     "is " + std::to_string(o.microbatch_size) +
                         ", which does not divide training.batch_per_rank " +
                         std::to_string(s.training.batch_per_rank),
                     "use a divisor of the local batch (microbatches = batch_per_rank / "
                     "microbatch_size)");
  o.microbatches =
      static_cast<int>(std::min<int64_t>(s.training.batch_per_rank / o.microbatch_size, kMaxInt));

  StageSplitFields sf;
  sf.stages = kP + ".layers_per_stage";
  sf.layers_per_stage = kP + ".layers_per_stage";
  sf.input_weight = kP + ".first_stage_less_layers";
  sf.output_weight = kP + ".last_stage_less_layers";
  const int layers = static_cast<int>(std::min<int64_t>(m.n_layers, kMaxInt));
  if (p.contains("module_fqns_per_model_part")) {
    if (o.layers_per_stage)
      throw InputError(kP + ".layers_per_stage", "is set beside module_fqns_per_model_part",
                       "keep one of the two");
    o.stages = parse_fqns(p.at("module_fqns_per_model_part"), m.n_layers);
    if (o.stages.size() % static_cast<size_t>(o.degree) != 0)
      throw InputError(
          kFqns,
          "has " + std::to_string(o.stages.size()) + " parts for pp " + std::to_string(o.degree),
          "give a multiple of pp parts (one stage each)");
    for (const auto& part : p.at("module_fqns_per_model_part"))
      o.module_fqns_per_model_part.push_back(part.get<std::vector<std::string>>());
  } else {
    const int n = pipeline_num_stages(o.schedule, o.degree, layers, o.layers_per_stage,
                                      o.first_stage_less_layers, o.last_stage_less_layers, sf);
    o.stages = split_decoder_into_stages(n, layers, o.first_stage_less_layers,
                                         o.last_stage_less_layers, sf);
  }
  // A stage without modules would have no parameters to shard or step (torchtitan's split never
  // makes one; an explicit split can).
  for (size_t k = 0; k < o.stages.size(); ++k)
    if (!o.stages[k].embeddings && o.stages[k].num_layers == 0 && !o.stages[k].output)
      throw InputError(p.contains("module_fqns_per_model_part") ? jr::index_path(kFqns, k)
                                                                : kP + ".layers_per_stage",
                       "leaves stage " + std::to_string(k) + " without modules",
                       "give every stage at least one module");
  o.stages_per_rank = static_cast<int>(o.stages.size()) / o.degree;
  PipelineScheduleFields f;
  f.pp = "fsdp.mesh.shape";
  f.stages_per_rank = p.contains("module_fqns_per_model_part") ? kFqns : kP + ".layers_per_stage";
  f.microbatches = kP + ".microbatch_size";
  check_pipeline_schedule(o.schedule_options(), f);
  return o;
}

}  // namespace fullshard::scenario_detail

namespace fullshard {

PipelineParallelOptions resolve_pipeline_parallel(const Scenario& s, PipelineScheduleKind schedule,
                                                  int64_t microbatch_size) {
  const nlohmann::json j = {{"schedule", pipeline_schedule_name(schedule)},
                            {"microbatch_size", microbatch_size}};
  return scenario_detail::parse_pipeline_parallel(&j, s);
}

}  // namespace fullshard
