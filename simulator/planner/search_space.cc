#include "simulator/planner/search_space.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "core/common/error.h"
#include "core/model/tensor_parallel.h"
#include "core/scenario/pipeline_resolve.h"

namespace fullshard::planner {

using Kind = ReshardAfterForward::Kind;

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16Fp32Reduce: return "bf16+fp32-reduce";
    case Precision::kBf16: return "bf16";
  }
  return "?";
}

const char* float8_choice_name(Float8Choice f) {
  switch (f) {
    case Float8Choice::kOff: return "off";
    case Float8Choice::kTensorwise: return "tensorwise";
    case Float8Choice::kTensorwiseAllGather: return "tensorwise+fp8-all-gather";
    case Float8Choice::kRowwise: return "rowwise";
    case Float8Choice::kRowwiseWithGwHp: return "rowwise_with_gw_hp";
  }
  return "?";
}

const std::vector<Float8Choice>& float8_choices() {
  static const std::vector<Float8Choice> v = {
      Float8Choice::kOff, Float8Choice::kTensorwise, Float8Choice::kTensorwiseAllGather,
      Float8Choice::kRowwise, Float8Choice::kRowwiseWithGwHp};
  return v;
}

bool Candidate::operator==(const Candidate& o) const {
  return replicate == o.replicate && shard == o.shard && tp == o.tp && ep == o.ep && pp == o.pp &&
         pp_schedule == o.pp_schedule && cp == o.cp && cp_rotate == o.cp_rotate &&
         reshard.kind == o.reshard.kind && reshard.n == o.reshard.n && precision == o.precision &&
         cpu_offload == o.cpu_offload && ac.mode == o.ac.mode && ac.every == o.ac.every &&
         micro_batch == o.micro_batch && grad_accum == o.grad_accum &&
         expandable_segments == o.expandable_segments && float8 == o.float8;
}

void check_space_options(const SpaceOptions& o) {
  if (o.gpus < 1)
    throw InputError("--gpus", fmt::format("is {}", o.gpus),
                     "give the number of GPUs, e.g. --gpus 8");
  if (o.gpus_per_node < 1)
    throw InputError("--gpus-per-node", fmt::format("is {}", o.gpus_per_node),
                     "give the GPUs in one node, e.g. --gpus-per-node 8");
  if (o.gpus % o.gpus_per_node != 0) {
    // int64: the next multiple of 2^31 - 1 GPUs does not fit an int.
    const int64_t lo = int64_t{o.gpus} / o.gpus_per_node * o.gpus_per_node;
    const int64_t hi = lo + o.gpus_per_node;
    throw InputError(
        "--gpus",
        fmt::format("is {}, not a multiple of --gpus-per-node {} (nodes must be whole)", o.gpus,
                    o.gpus_per_node),
        lo > 0 ? fmt::format("use --gpus {} or {}, or a --gpus-per-node that divides {}", lo, hi,
                             o.gpus)
               : fmt::format("use --gpus {}, or a --gpus-per-node that divides {}", hi, o.gpus));
  }
  if (o.global_batch) {
    const int64_t b = *o.global_batch;
    constexpr int64_t kMaxGlobalBatch = int64_t{1} << 40;  // as any batch size of a scenario
    if (b > kMaxGlobalBatch)
      throw InputError("--global-batch", fmt::format("is {} sequences, more than 2^40", b),
                       fmt::format("use a multiple of --gpus {}, e.g. {}", o.gpus, o.gpus));
    if (b < 1 || b % o.gpus != 0) {
      const int64_t lo = std::max<int64_t>(1, b / o.gpus) * o.gpus;
      const int64_t hi = (b / o.gpus + 1) * o.gpus;
      throw InputError(
          "--global-batch",
          fmt::format("is {} sequences, which {} GPUs cannot split evenly (every GPU trains "
                      "on the same whole number of sequences per step)",
                      b, o.gpus),
          lo == hi || b < o.gpus
              ? fmt::format("use a multiple of --gpus {}, e.g. {}", o.gpus, lo)
              : fmt::format("use a multiple of --gpus {}, e.g. {} or {}", o.gpus, lo, hi));
    }
  }
  for (int64_t mb : o.micro_batches)
    if (mb < 1) throw InputError("--micro-batches", fmt::format("has {}", mb), "give sizes >= 1");
  // A size or degree given twice planned every configuration of it twice: duplicate rows in the
  // ranked table, and the work multiplied (--micro-batches with 1 given 1000 times took 39 s).
  auto once = [](const auto& values, const char* flag, const char* fix) {
    for (size_t i = 0; i < values.size(); ++i)
      for (size_t k = 0; k < i; ++k)
        if (values[k] == values[i])
          throw InputError(flag, fmt::format("has {} twice", values[i]), fix);
  };
  once(o.micro_batches, "--micro-batches",
       "give each micro-batch size once, e.g. --micro-batches 1 2 4 8");
  once(o.tp_degrees, "--tp", "give each tensor-parallel degree once, e.g. --tp 1 2 4 8");
  once(o.ep_degrees, "--ep", "give each expert-parallel degree once, e.g. --ep 1 2 4 8");
  once(o.pp_degrees, "--pp", "give each pipeline-parallel degree once, e.g. --pp 1 2 4");
  std::vector<std::string> schedule_names;
  for (PipelineScheduleKind k : o.pp_schedules) schedule_names.push_back(pipeline_schedule_name(k));
  once(schedule_names, "--pp-schedule", "give each schedule once, e.g. --pp-schedule 1F1B");
  for (int pp : o.pp_degrees) {
    if (pp < 1 || o.gpus % pp != 0)
      throw InputError("--pp", fmt::format("has {}, which does not divide --gpus {}", pp, o.gpus),
                       "give degrees that divide the GPU count, e.g. --pp 1 2 4");
    if (pp > 1 && !o.global_batch)
      throw InputError("--pp",
                       fmt::format("has {} without --global-batch (a pipeline's microbatches "
                                   "split the batch)",
                                   pp),
                       "give --global-batch B, e.g. --global-batch " + std::to_string(4 * o.gpus));
  }
  once(o.cp_degrees, "--cp", "give each context-parallel degree once, e.g. --cp 1 2 4 8");
  for (int cp : o.cp_degrees)
    if (cp < 1 || o.gpus % cp != 0)
      throw InputError("--cp", fmt::format("has {}, which does not divide --gpus {}", cp, o.gpus),
                       "give degrees that divide the GPU count, e.g. --cp 1 2 4 8");
  std::vector<std::string> rotate_names;
  for (CpRotateMethod m : o.cp_rotates) rotate_names.push_back(cp_rotate_method_name(m));
  once(rotate_names, "--cp-rotate", "give each rotate method once, e.g. --cp-rotate allgather");
  for (int ep : o.ep_degrees)
    if (ep < 1 || ep > o.gpus)
      throw InputError(
          "--ep", fmt::format("has {}", ep),
          fmt::format("give degrees between 1 and --gpus {}, e.g. --ep 1 2 4 8", o.gpus));
  if (o.n_layers < 1)
    throw InputError("model.n_layers", "is < 1", "give a model with at least one block");
}

std::vector<int> selective_layer_periods(int64_t n_layers) {
  std::vector<int> out;
  int64_t last_count = -1;
  for (int64_t k = 2; k <= n_layers; ++k) {
    const int64_t count = n_layers / k;
    if (count != last_count) out.push_back(static_cast<int>(k));
    last_count = count;
  }
  return out;
}

std::vector<int> shard_sizes(int gpus) {
  std::vector<int> out = {gpus};
  for (int s = gpus - 1; s >= 1; --s)
    if (gpus % s == 0) out.push_back(s);
  return out;
}

std::vector<ReshardAfterForward> reshard_options(int shard) {
  std::vector<ReshardAfterForward> out(3);
  out[0].kind = Kind::kDefault;
  out[1].kind = Kind::kTrue;
  out[2].kind = Kind::kFalse;
  for (int d = 2; d < shard; ++d)
    if (shard % d == 0) {
      ReshardAfterForward r;
      r.kind = Kind::kInt;
      r.n = d;
      out.push_back(r);
    }
  return out;
}

bool shard_group_within_node(const Candidate& c, int gpus_per_node) {
  if (c.shard * c.cp == 1) return true;  // one rank: no shard collective crosses anything
  const int64_t span = int64_t{c.shard} * c.cp * c.tp;
  return span <= gpus_per_node && gpus_per_node % span == 0;
}

std::vector<int> tp_degrees(const ModelConfig& model, int64_t seq_len, int gpus, int gpus_per_node,
                            bool loss_parallel) {
  std::vector<int> out = {1};
  for (int tp : {2, 4, 8}) {
    if (gpus_per_node % tp != 0 || gpus % tp != 0) continue;
    try {
      check_tensor_parallel(model, seq_len, tp, loss_parallel);
    } catch (const InputError&) {
      continue;
    }
    out.push_back(tp);
  }
  return out;
}

std::vector<int> ep_degrees(const ModelConfig& model, int gpus, int gpus_per_node) {
  std::vector<int> out = {1};
  if (!model.moe.enabled()) return out;
  for (int ep = 2; ep <= gpus_per_node && ep <= gpus; ep *= 2)
    if (model.moe.num_experts % ep == 0 && gpus % ep == 0) out.push_back(ep);
  return out;
}

std::vector<std::pair<int64_t, int>> batch_options(const SpaceOptions& o, int dp) {
  std::vector<std::pair<int64_t, int>> out;
  if (!o.global_batch) {
    for (int64_t mb : o.micro_batches) out.push_back({mb, 1});
    return out;
  }
  if (*o.global_batch % dp != 0) return out;
  const int64_t per_gpu = *o.global_batch / dp;
  for (int64_t mb = per_gpu; mb >= 1; --mb)
    if (per_gpu % mb == 0) out.push_back({mb, static_cast<int>(per_gpu / mb)});
  return out;
}

std::vector<Candidate> enumerate_candidates(const SpaceOptions& o) {
  check_space_options(o);
  std::vector<ActivationCheckpointing> acs;
  for (RecomputeMode m :
       {RecomputeMode::kNone, RecomputeMode::kSelectiveOp, RecomputeMode::kFull}) {
    ActivationCheckpointing ac;
    ac.mode = m;
    acs.push_back(ac);
  }
  for (int k : selective_layer_periods(o.n_layers)) {
    ActivationCheckpointing ac;
    ac.mode = RecomputeMode::kSelectiveLayer;
    ac.every = k;
    acs.push_back(ac);
  }
  std::vector<Candidate> out;
  const std::vector<int> pps = o.pp_degrees.empty() ? std::vector<int>{1} : o.pp_degrees;
  const std::vector<int> cps = o.cp_degrees.empty() ? std::vector<int>{1} : o.cp_degrees;
  for (int pp : pps)
    for (int cp : cps)
      for (int tp : o.tp_degrees) {
        if (tp < 1 || pp < 1 || cp < 1 || o.gpus % (int64_t{tp} * pp * cp) != 0) continue;
        // NOTE [Context-parallel candidates]: a cp group trains on one batch (each rank a shard
        // of its sequences), so the data-parallel size is GPUs / (tp x pp x cp); FSDP shards over
        // shard x cp, so every shard size of dp is tried with the cp ranks added to the group.
        // What check_context_parallel refuses (seq_len not divisible by tp x 2 x cp, ...) throws in
        // candidate_scenario and plan() leaves the candidate out. pp x cp is not enumerated: it
        // simulates and trains, but pp candidates are never pruned (NOTE [Pipeline candidates are
        // not bounded]) and cp would multiply that unpruned sub-space.
        if (cp > 1 && pp > 1) continue;
        const int dp = o.gpus / (tp * pp * cp);
        const auto batches = batch_options(o, dp);
        const std::vector<CpRotateMethod> rotates =
            cp > 1 ? o.cp_rotates : std::vector<CpRotateMethod>{CpRotateMethod::kAllGather};
        const std::vector<int> eps = o.ep_degrees.empty() ? std::vector<int>{1} : o.ep_degrees;
        const std::vector<PipelineScheduleKind> schedules =
            pp > 1 ? o.pp_schedules
                   : std::vector<PipelineScheduleKind>{PipelineScheduleKind::k1F1B};
        for (int s : shard_sizes(dp))
          for (int ep : eps)
            for (CpRotateMethod rotate : rotates)
              for (PipelineScheduleKind sched : schedules)
                for (const auto& r : reshard_options(s * cp))
                  for (Precision p :
                       {Precision::kBf16Fp32Reduce, Precision::kBf16, Precision::kFp32})
                    for (bool offload : {false, true})
                      for (const auto& ac : acs)
                        for (const auto& [mb, ga] : batches)
                          for (Float8Choice f8 : o.float8) {
                            // What training.float8 refuses (NOTE [What float8 composes with]) is
                            // left out: tp, op-level SAC; the float8 all-gather without a shard
                            // dim, with offload or post-forward shards.
                            if (f8 != Float8Choice::kOff &&
                                (tp > 1 || pp > 1 || ac.mode == RecomputeMode::kSelectiveOp))
                              continue;
                            if (cp > 1 && ep > 1) continue;  // check_context_parallel refuses MoE
                            // NOTE [Pipeline sub-space]: pp candidates are simulated without
                            // pruning (NOTE [Pipeline candidates are not bounded] in planner.cc),
                            // so they keep torchtitan's two pp policies (reshard_after_forward
                            // false, its default with pp, and true, "always") and leave out CPU
                            // offload.
                            if (pp > 1 &&
                                (offload || !(r.kind == Kind::kTrue || r.kind == Kind::kFalse)))
                              continue;
                            if (f8 == Float8Choice::kTensorwiseAllGather &&
                                (s < 2 || offload || r.kind == Kind::kInt))
                              continue;
                            for (bool expandable : {false, true}) {
                              Candidate c;
                              c.replicate = dp / s;
                              c.shard = s;
                              c.tp = tp;
                              c.ep = ep;
                              c.pp = pp;
                              c.pp_schedule = sched;
                              c.cp = cp;
                              c.cp_rotate = rotate;
                              c.reshard = r;
                              c.precision = p;
                              c.cpu_offload = offload;
                              c.ac = ac;
                              c.micro_batch = mb;
                              c.grad_accum = ga;
                              c.expandable_segments = expandable;
                              c.float8 = f8;
                              out.push_back(c);
                            }
                          }
      }
  return out;
}

Scenario candidate_scenario(const Scenario& base, const Candidate& c) {
  FULLSHARD_CHECK(base.world_size() == c.pp * c.replicate * c.shard * c.cp * c.tp,
                  "candidate mesh does not match the base world size");
  Scenario s = base;
  if (c.hsdp()) {
    s.fsdp.mesh_shape = {c.replicate, c.shard};
    s.fsdp.mesh_dim_names = {"replicate", "shard"};
  } else {
    s.fsdp.mesh_shape = {c.shard};
    s.fsdp.mesh_dim_names = {"shard"};
  }
  if (c.cp > 1) {  // after shard, before tp (torchtitan's order)
    s.fsdp.mesh_shape.push_back(c.cp);
    s.fsdp.mesh_dim_names.push_back("cp");
  }
  if (c.tp > 1) {
    s.fsdp.mesh_shape.push_back(c.tp);
    s.fsdp.mesh_dim_names.push_back("tp");
  }
  if (c.pp > 1) {
    s.fsdp.mesh_shape.insert(s.fsdp.mesh_shape.begin(), c.pp);
    s.fsdp.mesh_dim_names.insert(s.fsdp.mesh_dim_names.begin(), "pp");
  }
  s.expert_parallel.degree = c.ep;
  s.fsdp.reshard_after_forward = c.reshard;
  // The base's per-unit overrides stay (torchtitan's last block unresharded), except an int
  // that does not divide this candidate's shard size.
  for (auto it = s.fsdp.per_unit_reshard.begin(); it != s.fsdp.per_unit_reshard.end();)
    it = it->second.kind == ReshardAfterForward::Kind::kInt && c.shard * c.cp % it->second.n != 0
             ? s.fsdp.per_unit_reshard.erase(it)
             : std::next(it);
  auto& mp = s.fsdp.mixed_precision;
  switch (c.precision) {
    case Precision::kFp32:
      mp.param_dtype.reset();
      mp.reduce_dtype.reset();
      break;
    case Precision::kBf16Fp32Reduce:
      mp.param_dtype = DType::kBFloat16;
      mp.reduce_dtype = DType::kFloat32;
      break;
    case Precision::kBf16:
      mp.param_dtype = DType::kBFloat16;
      mp.reduce_dtype = DType::kBFloat16;
      break;
  }
  s.fsdp.cpu_offload = c.cpu_offload;
  s.training.activation_checkpointing = c.ac;
  s.training.batch_per_rank = c.micro_batch;
  s.training.grad_accum_steps = c.grad_accum;
  // set_requires_all_reduce(False) changes nothing without a replicate group: on an FSDP
  // candidate every micro-batch reduces, which the scenario spells "all".
  if (!c.hsdp() && s.training.accumulation_sync == AccumulationSync::kReduceScatter)
    s.training.accumulation_sync = AccumulationSync::kAll;
  s.hardware.allocator.expandable_segments = c.expandable_segments;
  // NOTE [Float8 candidates]: plan --float8 searches training.float8 (refused when the base
  // already sets it); a float8 candidate filters torchtitan's ["output"]. Without --float8 every
  // candidate is kOff and keeps the base's section as it is.
  if (c.float8 != Float8Choice::kOff) {
    Float8Training& f = s.training.float8;
    f.filter_fqns = {"output"};
    f.enable_fsdp_float8_all_gather = c.float8 == Float8Choice::kTensorwiseAllGather;
    f.precompute_float8_dynamic_scale_for_fsdp = f.enable_fsdp_float8_all_gather;
    switch (c.float8) {
      case Float8Choice::kOff: break;
      case Float8Choice::kTensorwise:
      case Float8Choice::kTensorwiseAllGather: f.recipe = Float8Recipe::kTensorwise; break;
      case Float8Choice::kRowwise: f.recipe = Float8Recipe::kRowwise; break;
      case Float8Choice::kRowwiseWithGwHp: f.recipe = Float8Recipe::kRowwiseWithGwHp; break;
    }
  }
  // A scenario's tensor_parallel.async applies to the candidates that can run it (NOTE [What
  // async TP needs] in scenario_checks.cc): a tp dim, and no op-level selective checkpointing.
  s.tensor_parallel.async &= c.tp > 1 && c.ac.mode != RecomputeMode::kSelectiveOp;
  // NOTE [Chunked loss candidates]: a chunked loss needs its chunk count to divide the
  // candidate's tokens per micro-batch (the largest divisor of them not above the scenario's
  // count is used), and, with the output projection in the root unit, a root that stays
  // unsharded after forward (as a user running it must write; check_units_and_loss refuses
  // the other program).
  ModelImplementation& impl = s.model.implementation;
  if (impl.loss == LossImpl::kChunked) {
    const int64_t tokens = s.training.batch_per_rank * s.training.seq_len / c.cp;
    while (impl.loss_chunks > 1 && tokens % impl.loss_chunks != 0) --impl.loss_chunks;
    if (s.fsdp.units != ShardingUnits::kEmbedBlocksHead) {
      ReshardAfterForward keep;
      keep.kind = ReshardAfterForward::Kind::kFalse;
      s.fsdp.per_unit_reshard["root"] = keep;
    }
  }
  // NOTE [Pipeline candidates]: a pp candidate's accumulation steps are its pipeline's
  // microbatches (torchtitan: local batch / microbatch size, no gradient accumulation), its
  // stages torchtitan's default split; what the pipeline_parallel section refuses (a model it
  // cannot split, a schedule the microbatches do not fit, a zero-bubble schedule with op-level
  // selective checkpointing or tp, whose backward does not split) throws here and plan() leaves
  // the candidate out. Float8 and ep > 1 with pp are never enumerated (both refused with pp).
  if (c.pp > 1) {
    s.training.batch_per_rank = c.micro_batch * c.grad_accum;
    s.training.grad_accum_steps = 1;
    s.pipeline = resolve_pipeline_parallel(s, c.pp_schedule, c.micro_batch);
  }
  s.context_parallel = ContextParallelOptions{};
  if (c.cp > 1) {  // NOTE [Context-parallel candidates]
    check_context_parallel(s, c.cp);
    s.context_parallel.degree = c.cp;
    s.context_parallel.rotate_method = c.cp_rotate;
  }
  return s;
}

std::string mesh_text(const Candidate& c) {
  const std::string dp =
      c.hsdp() ? fmt::format("HSDP {}x{}", c.replicate, c.shard) : fmt::format("FSDP {}", c.shard);
  const std::string ep = c.ep > 1 ? fmt::format(" EP {}", c.ep) : "";
  const std::string pp =
      c.pp > 1 ? fmt::format("PP {} {} ", c.pp, pipeline_schedule_name(c.pp_schedule)) : "";
  const std::string cp =
      c.cp > 1 ? fmt::format(" CP {} {}", c.cp, cp_rotate_method_name(c.cp_rotate)) : "";
  return pp + (c.tp > 1 ? fmt::format("{}{} TP {}{}", dp, cp, c.tp, ep) : dp + cp + ep);
}

std::string reshard_text(const ReshardAfterForward& r) {
  switch (r.kind) {
    case Kind::kDefault: return "default";
    case Kind::kTrue: return "true";
    case Kind::kFalse: return "false";
    case Kind::kInt: return std::to_string(r.n);
  }
  return "?";
}

std::string ac_text(const ActivationCheckpointing& ac) {
  if (ac.mode == RecomputeMode::kSelectiveLayer) return fmt::format("every {}", ac.every);
  if (ac.mode == RecomputeMode::kSelectiveOp) return "op";
  return recompute_mode_name(ac.mode);
}

std::string candidate_text(const Candidate& c) {
  const std::string batch =
      c.pp > 1 ? fmt::format("mb {} x {} microbatches", c.micro_batch, c.grad_accum)
               : fmt::format("mb {} x ga {}", c.micro_batch, c.grad_accum);
  return fmt::format("{}, reshard {}, {}, {}AC {}, {}{}{}", mesh_text(c), reshard_text(c.reshard),
                     precision_name(c.precision), c.cpu_offload ? "offload, " : "", ac_text(c.ac),
                     batch, c.expandable_segments ? ", expandable" : "",
                     c.float8 != Float8Choice::kOff
                         ? fmt::format(", float8 {}", float8_choice_name(c.float8))
                         : "");
}

nlohmann::json candidate_settings_json(const Candidate& c) {
  nlohmann::json j;
  j["mesh"] =
      c.hsdp() ? nlohmann::json::array({c.replicate, c.shard}) : nlohmann::json::array({c.shard});
  if (c.cp > 1) j["mesh"].push_back(c.cp);
  if (c.tp > 1) j["mesh"].push_back(c.tp);
  if (c.pp > 1) j["mesh"].insert(j["mesh"].begin(), c.pp);
  j["sharding"] = c.hsdp() ? "hsdp" : "fsdp";
  j["tp"] = c.tp;
  j["ep"] = c.ep;
  j["pp"] = c.pp;
  if (c.pp > 1) {
    j["pipeline_schedule"] = pipeline_schedule_name(c.pp_schedule);
    j["pipeline_microbatches"] = c.grad_accum;
  }
  if (c.cp > 1) {  // only with cp: the plans of other runs keep their JSON
    j["cp"] = c.cp;
    j["cp_rotate_method"] = cp_rotate_method_name(c.cp_rotate);
  }
  switch (c.reshard.kind) {
    case Kind::kDefault: j["reshard_after_forward"] = nullptr; break;
    case Kind::kTrue: j["reshard_after_forward"] = true; break;
    case Kind::kFalse: j["reshard_after_forward"] = false; break;
    case Kind::kInt: j["reshard_after_forward"] = c.reshard.n; break;
  }
  j["precision"] = precision_name(c.precision);
  j["param_dtype"] =
      c.precision == Precision::kFp32 ? nlohmann::json(nullptr) : nlohmann::json("bf16");
  j["reduce_dtype"] = c.precision == Precision::kFp32   ? nlohmann::json(nullptr)
                      : c.precision == Precision::kBf16 ? nlohmann::json("bf16")
                                                        : nlohmann::json("fp32");
  j["cpu_offload"] = c.cpu_offload;
  if (c.ac.mode == RecomputeMode::kSelectiveLayer)
    j["activation_checkpointing"] = {{"mode", "selective_layer"}, {"every", c.ac.every}};
  else
    j["activation_checkpointing"] = recompute_mode_name(c.ac.mode);
  j["micro_batch"] = c.micro_batch;
  j["grad_accum_steps"] = c.grad_accum;
  j["expandable_segments"] = c.expandable_segments;
  if (c.float8 != Float8Choice::kOff) j["float8"] = float8_choice_name(c.float8);
  return j;
}

}  // namespace fullshard::planner
