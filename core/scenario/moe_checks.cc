#include "core/scenario/moe_checks.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/input_file.h"
#include "core/common/json_file.h"
#include "core/model/lora.h"
#include "core/model/transformer.h"
#include "core/pipeline/pipeline_schedule.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/lora_checks.h"
#include "core/scenario/recompute.h"
#include "core/scenario/scenario_sections.h"

namespace fullshard {

void check_moe(const Scenario& s) {
  const ModelConfig& m = s.model;
  if ((m.explicit_head_dim > 0 || m.qk_norm) && m.implementation.compile)
    throw InputError("model.implementation.compile",
                     "is true with Qwen3's decoupled head_dim / q-k norms, which the compiled "
                     "block does not fuse yet",
                     "use the eager block (compile false)");
  // MLA (NOTE [Multi-head latent attention] in core/model/mla_attention.cc) runs the eager
  // block's ops with fused or complex RoPE, without adapters, tp or cp (tp: check_tensor_parallel;
  // cp: check_context_parallel).
  if (m.mla.enabled()) {
    const std::string mla_fix =
        "docs/models.md, \"Multi-head latent attention\", says what is built";
    if (m.implementation.compile)
      throw InputError("model.implementation.compile",
                       "is true with multi-head latent attention, which the compiled block does "
                       "not fuse yet",
                       "use the eager block (compile false); " + mla_fix);
    if (m.implementation.rope == RopeImpl::kRotateHalf)
      throw InputError("model.implementation.rope",
                       "is \"rotate_half\" with multi-head latent attention",
                       "use \"complex\" (torchtitan's deepseek_v3: adjacent pairs) or \"fused\" "
                       "(one rotary kernel of the same cost, rotate-half pairs); " +
                           mla_fix);
    if (m.lora.enabled())
      throw InputError("model.lora", "is set with multi-head latent attention",
                       "remove it; LoRA on MLA's projections is not built yet; " + mla_fix);
  }
  if (!m.moe.enabled()) return;
  // NOTE [What MoE composes with]: the MoE layer is built as torchtitan runs it with ep = 1
  // (core/model/moe_layer.cc); these variants and compositions are not built yet and are
  // refused naming the field rather than simulated as something else (tp > 1: in
  // check_tensor_parallel, which the planner's candidates go through too).
  const MoeConfig& e = m.moe;
  const std::string fix = "docs/moe.md lists what the MoE layer builds so far";
  if (e.score_before_experts)
    throw InputError("model.moe.score_before_experts", "is true, which is not built yet",
                     "use false (torchtitan's qwen3 and deepseek_v3 models); " + fix);
  if (e.shared_expert_gate)
    throw InputError("model.moe.shared_expert_gate", "is true (qwen2_moe), which is not built yet",
                     fix);
  if (e.load_balance == MoeLoadBalance::kAuxLoss) {  // NOTE [Auxiliary load-balancing loss]
    const std::string what = "with model.moe.load_balance \"aux_loss\" (core/model/moe_aux_loss.h)";
    if (e.score_func != MoeScoreFunc::kSoftmax)
      throw InputError("model.moe.load_balance",
                       "is \"aux_loss\" with sigmoid scores; Hugging Face's loss is over the "
                       "router's softmax",
                       "use \"expert_bias\" or \"none\" with sigmoid scores; " + fix);
    if (e.num_expert_groups > 1)
      throw InputError("model.moe.num_expert_groups",
                       "is " + std::to_string(e.num_expert_groups) + " " + what +
                           ", whose Hugging Face loss counts a plain top-k over every expert",
                       "use 1 with the aux loss; " + fix);
  }
  if (m.implementation.compile)
    throw InputError("model.implementation.compile", "is true with a mixture-of-experts model",
                     "use the eager block; " + fix);
}

namespace {

namespace jr = json_reader;

// NOTE [Recorded routing] (core/model/moe_routing_record.h): every line of a --metrics file
// holds each rank's MoE layer calls of that step ("ranks"[i].tokens_per_expert, [calls][E]); a
// rank's calls over the lines, in step order, are its record.
std::shared_ptr<const RecordedRouting> read_recorded_routing(
    const std::string& path, int64_t experts,
    const std::string& P = "training.moe_routing.recorded") {
  const std::string fix = "give the --metrics file of a `fullshard train` run of this scenario";
  const std::string text =
      read_input_file(path, "a --metrics .jsonl file of a mixture-of-experts run");
  auto rec = std::make_shared<RecordedRouting>();
  rec->num_experts = experts;
  rec->source = path;
  size_t start = 0;
  int line_no = 0;
  int64_t steps_read = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const nlohmann::json j = parse_json_text(line, where);
    if (!j.is_object() || !j.contains("ranks") || !j.at("ranks").is_array())
      throw InputError(P, where + " is not a --metrics line (no \"ranks\" array)", fix);
    // The simulator plays from step 0: a resumed run's steps would replay as other steps.
    if (j.contains("step") && j.at("step") != nlohmann::json(steps_read))
      throw InputError(P,
                       where + " is step " + j.at("step").dump() + " where step " +
                           std::to_string(steps_read) + " comes next (a resumed run?)",
                       "record a run from its first step, without --resume");
    ++steps_read;
    if (j.contains("moe_call_order")) {
      const std::string order =
          jr::get_string(j.at("moe_call_order"), where + " moe_call_order", "\"...\"");
      if (!rec->call_order.empty() && order != rec->call_order)
        throw InputError(P,
                         where + " calls its MoE layers in another order (" + order +
                             ") than the lines before it (" + rec->call_order + ")",
                         fix);
      rec->call_order = order;
    }
    for (const auto& r : j.at("ranks")) {
      if (!r.is_object() || !r.contains("rank") || !r.contains("tokens_per_expert"))
        throw InputError(P,
                         where +
                             " has a rank without \"tokens_per_expert\" (not a "
                             "mixture-of-experts run's metrics)",
                         fix);
      const int64_t rank = jr::get_int(r.at("rank"), where + " ranks[].rank", 0, 1 << 20, "0");
      if (rec->calls.size() <= static_cast<size_t>(rank)) {
        rec->calls.resize(rank + 1);
        rec->step_calls.resize(rank + 1);
      }
      const nlohmann::json& calls = r.at("tokens_per_expert");
      if (!calls.is_array())
        throw InputError(P,
                         where + " rank " + std::to_string(rank) + ": tokens_per_expert is " +
                             jr::describe(calls),
                         fix);
      rec->step_calls[static_cast<size_t>(rank)].push_back(calls.size());
      for (const auto& h : calls) {
        if (!h.is_array() || static_cast<int64_t>(h.size()) != experts)
          throw InputError(P,
                           where + " rank " + std::to_string(rank) + ": a histogram of " +
                               (h.is_array() ? std::to_string(h.size()) : jr::describe(h)) +
                               " where the model has " + std::to_string(experts) + " experts",
                           "replay a recording of this scenario's model");
        std::vector<int64_t> counts;
        for (const auto& t : h)
          counts.push_back(jr::get_int(t, where + " tokens_per_expert", 0, int64_t{1} << 40, "3"));
        rec->calls[static_cast<size_t>(rank)].push_back(std::move(counts));
      }
    }
  }
  if (rec->calls.empty()) throw InputError(P, "(" + path + ") holds no step", fix);
  return rec;
}

// NOTE [Expert load] (core/model/moe_routing.h): a recorded run's histograms as one share per
// expert: "mean", every call of every rank summed; "hottest", the single call (any rank, step,
// layer) whose busiest expert got the largest share, the routing that stressed a rank most.
std::vector<double> load_of_recording(const RecordedRouting& rec, const std::string& statistic,
                                      const std::string& P) {
  const size_t E = static_cast<size_t>(rec.num_experts);
  std::vector<double> sum(E, 0), hottest;
  double hottest_share = -1;
  for (const auto& rank : rec.calls)
    for (const auto& h : rank) {
      double total = 0, top = 0;
      for (size_t e = 0; e < E; ++e) {
        sum[e] += static_cast<double>(h[e]);
        total += static_cast<double>(h[e]);
        top = std::max(top, static_cast<double>(h[e]));
      }
      if (total > 0 && top / total > hottest_share) {
        hottest_share = top / total;
        hottest.assign(h.begin(), h.end());
      }
    }
  std::vector<double> load = statistic == "hottest" ? hottest : sum;
  double total = 0;
  for (double v : load) total += v;
  if (!(total > 0))
    throw InputError(P, "(" + rec.source + ") routed no token", "give a run that trained a step");
  for (double& v : load) v /= total;
  return load;
}

// training.moe_routing {"expert_load": [shares] | "run.jsonl", "statistic": ...}.
std::vector<double> parse_expert_load(const nlohmann::json& v, int64_t experts,
                                      const std::string& base_dir) {
  const std::string P = "training.moe_routing.expert_load";
  const nlohmann::json& l = v.at("expert_load");
  if (l.is_string()) {
    const std::string statistic =
        v.contains("statistic")
            ? jr::get_choice(v.at("statistic"), "training.moe_routing.statistic",
                             {"mean", "hottest"})
            : "mean";
    const auto rec = read_recorded_routing(
        scenario_detail::resolve(base_dir, l.get<std::string>()), experts, P);
    return load_of_recording(*rec, statistic, P);
  }
  if (v.contains("statistic"))
    throw InputError("training.moe_routing.statistic", "is given with a list of shares",
                     "give statistic only with a recorded run's file as expert_load");
  if (!l.is_array() || static_cast<int64_t>(l.size()) != experts)
    throw InputError(P,
                     "is " + jr::describe(l) + " where the model has " + std::to_string(experts) +
                         " experts",
                     "give one share per expert (e.g. [0.4, 0.2, 0.2, 0.2]) or a --metrics file");
  std::vector<double> load;
  double total = 0;
  for (const auto& x : l) {
    load.push_back(jr::get_number(x, P + "[]", 0, true, 1e30, false, "0.25"));
    total += load.back();
  }
  if (!(total > 0))
    throw InputError(P, "has no positive share", "give each expert's share of the routed tokens");
  for (double& x : load) x /= total;
  return load;
}

}  // namespace

std::string moe_call_order(const Scenario& s) {
  std::string o;
  if (s.pipeline.enabled()) {
    o = std::string("pipeline ") + pipeline_schedule_name(s.pipeline.schedule) + ", " +
        std::to_string(s.pipeline.microbatches) + " microbatches, stages of layers";
    for (const PipelineStageModules& st : s.pipeline.stages)
      o += " " + std::to_string(st.first_layer) + "-" +
           std::to_string(st.first_layer + st.num_layers - 1);
  } else {
    o = "grad_accum_steps " + std::to_string(s.training.grad_accum_steps);
  }
  std::string recomputed;
  for (int64_t i = 0; i < s.model.n_layers; ++i)
    if (s.model.moe.is_moe_layer(i) && recomputes_block(s.training.activation_checkpointing, i))
      recomputed += (recomputed.empty() ? "" : ",") + std::to_string(i);
  return o + "; MoE layers recomputed: " + (recomputed.empty() ? "none" : recomputed);
}

namespace {
// Per layer, the weight ops a zero-bubble schedule's W runs apart (each recomputes a checkpointed
// block once): a block's parameters that require grad, a linear's bias with its weight (one
// weight part computes both). Empty without a split backward.
std::vector<int> split_backward_weight_parts(const Scenario& s) {
  const PipelineScheduleKind k = s.pipeline.schedule;
  if (!s.pipeline.enabled() ||
      (k != PipelineScheduleKind::kInterleavedZeroBubble &&
       k != PipelineScheduleKind::kZBVZeroBubble && k != PipelineScheduleKind::kDualPipeV))
    return {};
  Transformer model(s.model);
  const bool lora = s.model.lora.enabled();
  freeze_parameters(model.root(), s.training.frozen, lora, frozen_dtype(s));
  std::map<std::string, bool> weight_trains;
  model.root().for_each_param([&](Param& p) {
    if (p.fqn.size() > 7 && p.fqn.compare(p.fqn.size() - 7, 7, ".weight") == 0)
      weight_trains[p.fqn.substr(0, p.fqn.size() - 7)] = p.requires_grad;
  });
  std::vector<int> parts(static_cast<size_t>(s.model.n_layers), 0);
  model.root().for_each_param([&](Param& p) {
    if (!p.requires_grad || p.fqn.rfind("layers.", 0) != 0) return;
    const size_t dot = p.fqn.find('.', 7);
    const int64_t layer = std::stoll(p.fqn.substr(7, dot - 7));
    const bool bias = p.fqn.size() > 5 && p.fqn.compare(p.fqn.size() - 5, 5, ".bias") == 0;
    if (bias) {
      auto it = weight_trains.find(p.fqn.substr(0, p.fqn.size() - 5));
      if (it != weight_trains.end() && it->second) return;  // its weight's part computes it
    }
    if (layer >= 0 && layer < s.model.n_layers) ++parts[static_cast<size_t>(layer)];
  });
  return parts;
}
}  // namespace

void check_recorded_routing(const Scenario& s) {
  const RecordedRouting* rec = s.training.moe_routing_record.get();
  if (!rec) return;
  const std::string P = "training.moe_routing.recorded";
  const std::string src = "(" + rec->source + ")";
  // The k-th call of the record is the k-th call of the replay only when both call the layers
  // in the same order (NOTE [Recorded routing] in core/model/moe_routing_record.h); equal counts
  // per step do not show it (1F1B and GPipe with AC, or two looped schedules, call as often in
  // another order).
  if (!rec->call_order.empty() && rec->call_order != moe_call_order(s))
    throw InputError(P,
                     src + " was recorded calling the MoE layers as " + rec->call_order +
                         ", where this scenario calls them as " + moe_call_order(s),
                     "replay a run with this scenario's grad_accum_steps, pipeline_parallel and "
                     "activation_checkpointing");
  if (rec->calls.size() != static_cast<size_t>(s.world_size()))
    throw InputError(P,
                     src + " records " + std::to_string(rec->calls.size()) +
                         " ranks, but the job has " + std::to_string(s.world_size()),
                     "replay a run of this scenario's mesh");
  // A step calls each MoE layer once per micro-batch (NOTE [Recorded routing]), and again in the
  // backward when activation checkpointing recomputes its block. With a pp dim a rank calls only
  // its stages' layers, once per pipeline microbatch (NOTE [MoE in pipeline stages] in
  // core/train/pipeline_program.cc).
  // Under a zero-bubble schedule a recomputed block runs again at I and at each of its weight
  // ops' W (NOTE [Split backward of a checkpointed block] in core/model/autograd.cc); on the
  // first stage, whose W is the whole backward, once.
  const ActivationCheckpointing& ac = s.training.activation_checkpointing;
  const std::vector<int> w_recomputes = split_backward_weight_parts(s);
  // With a pp dim, per action of the rank's schedule (DualPipeV mixes full backwards, which
  // recompute once, with I / W pairs): F calls each MoE layer of its stage once; a recomputed
  // block runs again in B, in a later stage's I, and in W once per weight op (the first stage's
  // W is its whole backward: once).
  const PipelineOrder order =
      s.pipeline.enabled() ? build_pipeline_order(s.pipeline.schedule_options()) : PipelineOrder{};
  auto calls_per_step = [&](size_t rank) {
    size_t n = 0;
    if (!s.pipeline.enabled()) {
      for (int64_t i = 0; i < s.model.n_layers; ++i)
        if (s.model.moe.is_moe_layer(i))
          n += static_cast<size_t>(s.training.grad_accum_steps) *
               (recomputes_block(ac, i) ? 2 : 1);
      return n;
    }
    const int pp_index = static_cast<int>(rank) / (s.world_size() / s.pipeline.degree);
    for (const PipelineAction& a : order[static_cast<size_t>(pp_index)]) {
      const PipelineStageModules& st = s.pipeline.stages[static_cast<size_t>(a.stage)];
      for (int64_t i = st.first_layer; i < st.first_layer + st.num_layers; ++i) {
        if (!s.model.moe.is_moe_layer(i)) continue;
        const bool again = recomputes_block(ac, i);
        switch (a.op) {
          case PipelineOp::kForward: n += 1; break;
          case PipelineOp::kFullBackward: n += again ? 1 : 0; break;
          case PipelineOp::kBackwardInput: n += again && a.stage != 0 ? 1 : 0; break;
          case PipelineOp::kBackwardWeight:
            n += !again ? 0
                 : a.stage == 0 ? 1
                                : static_cast<size_t>(w_recomputes[static_cast<size_t>(i)]);
            break;
        }
      }
    }
    return n;
  };
  for (size_t r = 0; r < rec->step_calls.size(); ++r) {
    const size_t per_step = calls_per_step(r);
    const auto& steps = rec->step_calls[r];
    if (steps.size() < static_cast<size_t>(s.training.steps))
      throw InputError(P,
                       src + " records " + std::to_string(steps.size()) + " steps of rank " +
                           std::to_string(r) + ", and training.steps is " +
                           std::to_string(s.training.steps),
                       "simulate at most as many steps as the recorded run trained");
    for (size_t k = 0; k < steps.size(); ++k)
      if (steps[k] != per_step)
        throw InputError(P,
                         src + " step " + std::to_string(k + 1) + " of rank " + std::to_string(r) +
                             " has " + std::to_string(steps[k]) +
                             " MoE layer calls, where this scenario makes " +
                             std::to_string(per_step) +
                             " per step (a call per MoE layer of its stages and micro-batch, "
                             "more where activation checkpointing recomputes the block)",
                         "replay a run with this scenario's grad_accum_steps, pipeline_parallel "
                         "and activation_checkpointing");
  }
}

void apply_moe_options(const nlohmann::json& v, ModelConfig& model) {
  const std::string P = "model.moe";
  if (!model.moe.enabled())
    throw InputError(P, "is set, but the model has no experts",
                     "remove it, or name a mixture-of-experts model (docs/moe.md)");
  if (!v.is_object())
    throw InputError(P, "is " + jr::describe(v),
                     "write {\"capacity_factor\": 1.25} (0: dropless, torchtitan's routing)");
  scenario_detail::check_fields(v, P);
  if (v.contains("capacity_factor"))
    model.moe.capacity_factor = jr::get_number(v.at("capacity_factor"), P + ".capacity_factor", 0,
                                               true, 1e6, true, "1.25 (0: dropless)");
  if (v.contains("drop_policy")) {
    if (!model.moe.drops_tokens())
      throw InputError(P + ".drop_policy", "is given without a capacity_factor above 0",
                       "remove it, or set model.moe.capacity_factor (e.g. 1.25)");
    model.moe.drop_policy =
        jr::get_choice(v.at("drop_policy"), P + ".drop_policy", {"probs", "position"}) == "probs"
            ? MoeDropPolicy::kProbs
            : MoeDropPolicy::kPosition;
  }
  // "none" switches off a load balancing the model carries (DeepSeek-V3's expert bias: NOTE
  // [Expert bias] in core/model/expert_bias.h); the others say what the model carries.
  if (v.contains("load_balance")) {
    const std::string lb = jr::get_choice(v.at("load_balance"), P + ".load_balance",
                                          {"none", "aux_loss", "expert_bias"});
    model.moe.load_balance = lb == "none"       ? MoeLoadBalance::kNone
                             : lb == "aux_loss" ? MoeLoadBalance::kAuxLoss
                                                : MoeLoadBalance::kExpertBias;
  }
  MoeConfig& m = model.moe;
  if (v.contains("load_balance_coeff"))
    m.load_balance_coeff = jr::get_number(v.at("load_balance_coeff"), P + ".load_balance_coeff",
                                          0, false, 1e6, true, "1e-3 (torchtitan's default)");
  if (m.load_balance == MoeLoadBalance::kExpertBias && !(m.load_balance_coeff > 0))
    throw InputError(P + ".load_balance_coeff", "is 0 with the expert bias",
                     "give its update rate, e.g. \"load_balance_coeff\": 1e-3");
  // Group-limited routing (NOTE [Expert bias] in core/model/expert_bias.h): HF n_group /
  // topk_group, torchtitan num_expert_groups / num_limited_groups.
  if (v.contains("num_expert_groups")) {
    const bool had_groups = m.num_expert_groups > 1;
    m.num_expert_groups = jr::get_int(v.at("num_expert_groups"), P + ".num_expert_groups", 1,
                                      m.num_experts, "8 (1: no groups)");
    // Without num_limited_groups: a model without groups gets groups and no limit; a model's
    // own limit stays where the new groups can keep it (restating deepseek-v3-671b's 8 keeps 4).
    if (!v.contains("num_limited_groups") &&
        (!had_groups || m.num_limited_groups > m.num_expert_groups))
      m.num_limited_groups = m.num_expert_groups;
  }
  if (v.contains("num_limited_groups"))
    m.num_limited_groups = jr::get_int(v.at("num_limited_groups"), P + ".num_limited_groups", 1,
                                       m.num_expert_groups, "4 (at most num_expert_groups)");
  const int64_t per = m.num_experts / m.num_expert_groups;
  if (m.num_experts % m.num_expert_groups != 0 || (m.num_expert_groups > 1 && per < 2))
    throw InputError(P + ".num_expert_groups",
                     "is " + std::to_string(m.num_expert_groups) + ", which does not split the " +
                         std::to_string(m.num_experts) + " experts into groups of 2 or more",
                     "give a divisor of the experts leaving 2 or more per group (1: no groups)");
  if (m.num_limited_groups * per < m.top_k)
    throw InputError(P + ".num_limited_groups",
                     "is " + std::to_string(m.num_limited_groups) + ": its groups hold " +
                         std::to_string(m.num_limited_groups * per) +
                         " experts, fewer than top_k " + std::to_string(m.top_k),
                     "keep at least " + std::to_string((m.top_k + per - 1) / per) + " groups");
}

void apply_moe_routing(const nlohmann::json& v, ModelConfig& model, TrainingOptions& training,
                       const std::string& base_dir) {
  const std::string P = "training.moe_routing";
  if (!model.moe.enabled())
    throw InputError(P, "is set, but the model has no experts",
                     "remove it, or name a mixture-of-experts model (docs/moe.md)");
  if (v.is_string()) {  // "worst": NOTE [Worst-case routing] in simulator/worst_routing.h
    const std::string c = jr::get_choice(v, P, {"balanced", "worst"});
    model.moe.hot_expert_factor = c == "worst" ? static_cast<double>(model.moe.num_experts) : 1.0;
    return;
  }
  const std::string forms =
      "write \"balanced\", \"worst\", {\"hot_expert_factor\": 2}, {\"recorded\": "
      "\"run.jsonl\"} or {\"expert_load\": \"run.jsonl\"}";
  if (!v.is_object()) throw InputError(P, "is " + jr::describe(v), forms);
  scenario_detail::check_fields(v, P);
  const int forms_given = static_cast<int>(v.contains("recorded")) +
                          static_cast<int>(v.contains("hot_expert_factor")) +
                          static_cast<int>(v.contains("expert_load"));
  if (forms_given != 1)
    throw InputError(P,
                     forms_given == 0 ? (v.empty() ? "is empty" : "gives no routing")
                                      : "gives more than one of hot_expert_factor, recorded and "
                                        "expert_load",
                     forms);
  if (v.contains("expert_load")) {
    model.moe.expert_load = parse_expert_load(v, model.moe.num_experts, base_dir);
    return;
  }
  if (v.contains("statistic"))
    throw InputError("training.moe_routing.statistic", "is given without expert_load",
                     "remove it, or give expert_load a recorded run's file");
  if (v.contains("recorded")) {
    const std::string rel =
        jr::get_string(v.at("recorded"), P + ".recorded", "\"run.jsonl\" (a --metrics file)");
    training.moe_routing_record =
        read_recorded_routing(scenario_detail::resolve(base_dir, rel), model.moe.num_experts);
    return;
  }
  model.moe.hot_expert_factor =
      jr::get_number(v.at("hot_expert_factor"), P + ".hot_expert_factor", 1, true,
                     static_cast<double>(model.moe.num_experts), true, "2");
}

}  // namespace fullshard
