#pragma once
// Shared pieces of the real-training property tests (tests/property/cpu_*_prop_test.cc): the
// tensor-parallel meshes they draw, the single-rank reference job, the root kept unsharded for
// the chunked loss, and the check that the simulator's memory prediction equals what the CPU
// backend measured, to the byte.
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "tests/support/cpu_support.h"
#include "tests/support/sim_support.h"

namespace fullshard::testing {

// [replicate, shard, tp] with at most 8 ranks (threads), as a JSON mesh: 2-D (dp_shard, tp)
// or 3-D (dp_replicate, dp_shard, tp). Sets the world size and the shard degree drawn.
inline nlohmann::json tp_mesh(int tp, int* world, int* shard) {
  const int replicate = *rc::gen::element(1, 2);
  *shard = *rc::gen::inRange(1, 4);
  RC_PRE(replicate * *shard * tp <= 8);
  *world = replicate * *shard * tp;
  if (replicate == 1 && *rc::gen::arbitrary<bool>())
    return {{"shape", {*shard, tp}}, {"dim_names", {"dp_shard", "tp"}}};
  return {{"shape", {replicate, *shard, tp}}, {"dim_names", {"dp_replicate", "dp_shard", "tp"}}};
}

// The same job on one rank: the whole global batch (every one of the `dp` data-parallel ranks'),
// no sharding, no per-unit settings.
inline nlohmann::json unsharded_job(nlohmann::json j, int dp) {
  j["fsdp"]["mesh"] = {{"shape", {1}}};
  j["fsdp"].erase("reshard_after_forward");
  j["fsdp"].erase("per_unit");
  j["fsdp"]["cpu_offload"] = false;
  j["training"]["batch_per_rank"] = j["training"]["batch_per_rank"].get<int>() * dp;
  j["hardware"]["gpus_per_node"] = 1;
  return j;
}

// A chunk count for the chunked loss: a divisor of the rank's batch x seq tokens.
inline int draw_loss_chunks(const nlohmann::json& j) {
  const int tokens =
      j["training"]["batch_per_rank"].get<int>() * j["training"]["seq_len"].get<int>();
  std::vector<int> divisors;
  for (int n = 1; n <= tokens; ++n)
    if (tokens % n == 0) divisors.push_back(n);
  return *rc::gen::elementOf(divisors);
}

// The chunked loss calls the output projection after the root's forward: with the output in
// the root unit, the root must not reshard after forward (a parse error otherwise).
inline void keep_root_unsharded_for_chunks(nlohmann::json& j) {
  if (j["model"].value("implementation", nlohmann::json::object()).value("loss", "") != "chunked" ||
      j["fsdp"].value("units", "") == "embed_blocks_head")
    return;
  j["fsdp"]["per_unit"]["root"] = {{"reshard_after_forward", false}};
}

// The two tensor-parallel properties each architecture is held to.
enum class TpProperty { kEqualsUnsharded, kPeakMemory };

// One draw of a tensor-parallel property, whatever the model (`model(tp)` returns a random model
// that splits tp ways): tp 2 or 4 on a tp_mesh; reshard_after_forward (default, bool or a
// divisor of the shard degree); CPU offload; activation checkpointing; 2 steps of batch 1-2 and
// a sequence tp divides (sequence parallel splits it); loss parallel or gathered logits. For
// kEqualsUnsharded: gradient clipping or not, Adam eps 1e-6 (NOTE [fp32 tolerance] in
// cpu_training_prop_test.cc) and a seed; for kPeakMemory: mixed precision, gradient
// accumulation and expandable segments. Sets the world size and the tp degree drawn.
template <typename ModelOf>
nlohmann::json draw_tp_scenario(TpProperty what, ModelOf&& model, int* world, int* tp) {
  using nlohmann::json;
  *tp = *rc::gen::element(2, 4);
  int shard = 0;
  TinyOptions o;
  const json mesh = tp_mesh(*tp, world, &shard);
  std::vector<json> raf = {nullptr, true, false};
  for (int n = 2; n < shard; ++n)
    if (shard % n == 0) raf.push_back(n);
  o.reshard_after_forward = *rc::gen::elementOf(raf);
  o.cpu_offload = *rc::gen::arbitrary<bool>();
  o.activation_checkpointing = *rc::gen::element(json("none"), json("full"), json("selective_op"));
  o.steps = 2;
  o.batch = *rc::gen::inRange(1, 3);
  o.seq = *tp * *rc::gen::inRange(1, 4);
  if (what == TpProperty::kEqualsUnsharded) {
    o.max_grad_norm = *rc::gen::element(0.0, 1.0);
  } else {
    o.mixed_precision =
        *rc::gen::element(json::object(), json{{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}},
                          json{{"param_dtype", "bf16"}});
    o.grad_accum_steps = *rc::gen::inRange(1, 3);
    o.hardware_extra = {{"allocator", {{"expandable_segments", *rc::gen::arbitrary<bool>()}}}};
  }
  json j = tiny_scenario_json(o);
  j["fsdp"]["mesh"] = mesh;
  j["hardware"]["gpus_per_node"] = *world;
  j["model"] = model(*tp);
  if (what == TpProperty::kEqualsUnsharded) {
    j["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}, {"max_grad_norm", o.max_grad_norm}};
    j["training"]["seed"] = *rc::gen::inRange(0, 1000);
  }
  const bool loss_parallel = *rc::gen::arbitrary<bool>();
  j["tensor_parallel"] = {{"loss_parallel", loss_parallel}};
  RC_TAG("tp " + std::to_string(*tp));
  RC_TAG(loss_parallel ? "loss parallel" : "logits gathered");
  RC_TAG(mesh["shape"].size() == 3 ? "3-D" : "2-D");
  return j;
}

// Runs `sharded` and its single-rank reference `ref` for real and asserts the parameters after
// the last step agree within |a - b| <= 1e-5 + 1e-3 |b| (NOTE [fp32 tolerance]) and the step
// losses within 1e-4 (a rapidcheck property's assertion).
// How close two runs' parameters (|a - b| <= atol + rtol |b|) and mean losses must be.
// `movement` > 0 adds that fraction of each tensor's largest movement over the run (the
// reference's final values against its initial ones) to every element's atol (NOTE [bf16
// originals tolerance] in cpu_training_prop_test.cc).
struct Tolerance {
  double atol = 1e-5, rtol = 1e-3, loss = 1e-4;  // NOTE [fp32 tolerance]
  double movement = 0;
};

inline void sharded_equals_unsharded(const nlohmann::json& sharded, const nlohmann::json& ref,
                                     Tolerance tol = {}) {
  const RealRun a = run_real(parse_scenario(sharded));
  const RealRun b = run_real(parse_scenario(ref));
  std::map<std::string, double> slack;
  if (tol.movement > 0) {
    const RealRun init = run_real(parse_scenario(ref), /*steps=*/0);
    for (const auto& [fqn, vb] : b.params) {
      const std::vector<float>& v0 = init.params.at(fqn);
      RC_ASSERT(v0.size() == vb.size());
      double moved = 0;
      for (size_t i = 0; i < vb.size(); ++i)
        moved = std::max(moved, std::abs(static_cast<double>(vb[i]) - v0[i]));
      slack[fqn] = tol.movement * moved;
    }
  }
  std::string where;
  const double v = max_violation(a, b, tol.atol, tol.rtol, &where, &slack);
  if (!(v <= 1.0)) RC_FAIL("worst parameter difference at " + where);
  for (size_t k = 0; k < b.mean_loss.size(); ++k)
    RC_ASSERT(std::abs(a.mean_loss[k] - b.mean_loss[k]) <= tol.loss);
}

// Simulates every rank of `s`, runs it for real, and asserts each rank's peak allocated and
// reserved bytes equal the prediction (a rapidcheck property's assertion).
// With expert parallelism's "routed" receive buffers the run's memory follows its router: the
// run goes first and the simulator replays its recorded routing (NOTE [Recorded routing]).
inline void predicted_peaks_equal_measured(Scenario s) {
  // Routed buffers, and with token dropping the combine's kept rows, follow the run's routing
  // (NOTE [Receive buffers] in core/scenario/scenario.h).
  const bool replay = s.expert_parallel.degree > 1 &&
                      (s.expert_parallel.receive_buffers == ReceiveBuffers::kRouted ||
                       s.model.moe.drops_tokens());
  RealRun real;
  if (replay) {
    real = run_real(s);
    auto rec = std::make_shared<RecordedRouting>();
    rec->num_experts = s.model.moe.num_experts;
    for (const auto& r : real.ranks) {
      rec->calls.emplace_back();
      for (const auto& st : r.steps)
        rec->calls.back().insert(rec->calls.back().end(), st.tokens_per_expert.begin(),
                                 st.tokens_per_expert.end());
      // A pipeline rank whose stages hold no MoE layer records nothing (the V schedules' rank 0
      // of a 2-layer model: the embedding and the output).
      RC_ASSERT(s.pipeline.enabled() || !rec->calls.back().empty());
    }
    s.training.moe_routing_record = std::move(rec);
  }
  sim::SimulateOptions so;
  so.all_ranks = true;
  const sim::SimulationReport pred = sim::simulate_scenario(s, so);
  if (!pred.ok()) RC_FAIL(problems_text(pred));
  if (!replay) real = run_real(s);
  for (const auto& c : pred.classes)
    for (int r : c.ranks) {
      RC_ASSERT(real.ranks[r].report.peak_allocated_bytes == c.peak_allocated_bytes);
      RC_ASSERT(real.ranks[r].report.peak_reserved_bytes == c.peak_reserved_bytes);
      RC_ASSERT(real.ranks[r].report.init_peak_allocated_bytes == c.init_peak_allocated_bytes);
      RC_ASSERT(real.ranks[r].report.init_peak_reserved_bytes == c.init_peak_reserved_bytes);
      // The experts' and routed tokens' bytes at the peak (NOTE [MoE memory at the peak]).
      RC_ASSERT(real.ranks[r].report.moe_at_peak == c.moe_at_peak);
    }
}

}  // namespace fullshard::testing
