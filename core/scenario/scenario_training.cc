// The "training" section of a scenario (docs/scenario-format.md): batch, sequence, steps,
// gradient accumulation, activation checkpointing, optimizer, data and checkpoint saving.
#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/scenario/float8_checks.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/scenario_sections.h"

namespace fullshard::scenario_detail {
namespace {

namespace jr = json_reader;
using nlohmann::json;

ActivationCheckpointing parse_activation_checkpointing(const json& v) {
  const std::string P = "training.activation_checkpointing";
  const std::vector<std::string> modes = {"none", "full", "selective_layer", "selective_op"};
  const std::string layer_example = "{\"mode\": \"selective_layer\", \"every\": 2}";
  auto to_mode = [](const std::string& s) {
    if (s == "full") return RecomputeMode::kFull;
    if (s == "selective_layer") return RecomputeMode::kSelectiveLayer;
    if (s == "selective_op") return RecomputeMode::kSelectiveOp;
    return RecomputeMode::kNone;
  };
  ActivationCheckpointing ac;
  if (v.is_string()) {
    ac.mode = to_mode(jr::get_choice(v, P, modes));
    if (ac.mode == RecomputeMode::kSelectiveLayer)
      throw InputError(P, "is \"selective_layer\" without a period",
                       "write " + layer_example + " to checkpoint every 2nd block");
    return ac;
  }
  if (!v.is_object())
    throw InputError(P, "is " + jr::describe(v),
                     "write \"none\", \"full\", \"selective_op\" or " + layer_example);
  check_fields(v, P);
  jr::require_field(v, P, "mode", "write " + layer_example + " or a plain string such as \"full\"");
  ac.mode = to_mode(jr::get_choice(v.at("mode"), P + ".mode", modes));
  if (v.contains("every")) {
    if (ac.mode != RecomputeMode::kSelectiveLayer)
      throw InputError(P + ".every",
                       "is given but mode is \"" + v.at("mode").get<std::string>() + "\"",
                       "remove \"every\": it applies only to mode \"selective_layer\"");
    ac.every = static_cast<int>(jr::get_int(v.at("every"), P + ".every", 1, kMaxInt, "2"));
  } else if (ac.mode == RecomputeMode::kSelectiveLayer) {
    jr::require_field(v, P, "every", "write " + layer_example + " (checkpoint every k-th block)");
  }
  return ac;
}

OptimizerOptions parse_optimizer(const json& v) {
  const std::string P = "training.optimizer";
  jr::require_object(v, P, "{\"lr\": 3e-4, \"weight_decay\": 0.1}");
  check_fields(v, P);
  OptimizerOptions o;
  auto num = [&](const char* key, double min, bool min_incl, double max, bool max_incl,
                 const char* example, double& dst) {
    if (v.contains(key))
      dst =
          jr::get_number(v.at(key), jr::child_path(P, key), min, min_incl, max, max_incl, example);
  };
  num("lr", 0, true, kInf, false, "3e-4", o.lr);
  num("beta1", 0, true, 1, false, "0.9", o.beta1);
  num("beta2", 0, true, 1, false, "0.95", o.beta2);
  num("eps", 0, false, kInf, false, "1e-8", o.eps);
  num("weight_decay", 0, true, kInf, false, "0.1", o.weight_decay);
  num("max_grad_norm", 0, true, kInf, false, "1.0 (0 disables clipping)", o.max_grad_norm);
  if (v.contains("implementation"))
    o.fused = jr::get_choice(v.at("implementation"), jr::child_path(P, "implementation"),
                             {"foreach", "fused"}) == "fused";
  return o;
}

// "data": "path" or {"path": ..., "format": ..., "val_path": ..., "sampling": ...}.
DataOptions parse_data(const json& j, const std::string& base_dir) {
  const std::string P = "training.data";
  DataOptions d;
  if (j.is_string()) {
    d.path = jr::get_string(j, P, "\"data/train.bin\"");
  } else {
    jr::require_object(j, P, "{\"path\": \"data/train.bin\"} or \"data/train.bin\"");
    check_fields(j, P);
    jr::require_field(j, P, "path",
                      "add \"path\": a token file, a folder of shards, a glob or a text file");
    d.path = jr::get_string(j.at("path"), P + ".path", "\"data/train.bin\"");
    if (j.contains("format"))
      d.format = jr::get_choice(j.at("format"), P + ".format",
                                {"auto", "llmc", "uint16", "uint32", "text", "jsonl"});
    if (j.contains("val_path"))
      d.val_path = jr::get_string(j.at("val_path"), P + ".val_path", "\"data/val.bin\"");
    if (j.contains("sampling"))
      d.sampling =
          jr::get_choice(j.at("sampling"), P + ".sampling", {"sequential", "shuffle", "random"});
    if (j.contains("tokenizer")) {
      d.tokenizer = jr::get_string(j.at("tokenizer"), P + ".tokenizer",
                                   "\"byte\", \"tokenizer.json\" or \"gpt2.tiktoken\"");
      if (d.tokenizer.empty())
        throw InputError(P + ".tokenizer", "is empty",
                         "give \"byte\", a tokenizer.json or a tiktoken ranks file");
      if (d.tokenizer != "byte") d.tokenizer = resolve(base_dir, d.tokenizer);
    }
    if (j.contains("bos"))
      d.bos = jr::get_string(j.at("bos"), P + ".bos", "\"<|begin_of_text|>\", or \"\" for none");
    if (j.contains("eos"))
      d.eos = jr::get_string(j.at("eos"), P + ".eos", "\"<|end_of_text|>\", or \"\" for none");
  }
  if (d.path.empty())
    throw InputError(j.is_string() ? P : P + ".path", "is empty",
                     "give a token file, a folder or a glob");
  d.path = resolve(base_dir, d.path);
  if (!d.val_path.empty()) d.val_path = resolve(base_dir, d.val_path);
  return d;
}

// "checkpoint": {"every": 100, "mode": "async", "storage_write_bandwidth": 2e9}.
TrainingCheckpointOptions parse_checkpoint_save(const json& v) {
  const std::string P = "training.checkpoint";
  jr::require_object(v, P, "{\"every\": 100, \"mode\": \"async\"}");
  check_fields(v, P);
  jr::require_field(v, P, "every", "add \"every\": the steps between two saves, e.g. 100");
  TrainingCheckpointOptions c;
  c.every = static_cast<int>(jr::get_int(v.at("every"), P + ".every", 1, kMaxInt, "100"));
  if (v.contains("mode"))
    c.mode = *checkpoint_save_mode_from_name(
        jr::get_choice(v.at("mode"), P + ".mode", checkpoint_save_mode_names()));
  if (v.contains("storage_write_bandwidth"))
    c.storage_write_bandwidth = jr::get_number(
        v.at("storage_write_bandwidth"), P + ".storage_write_bandwidth", kMinFigureRate, true, kInf,
        false, "2e9 (bytes/s per node)");  // NOTE [Figure bounds]
  return c;
}

}  // namespace

TrainingOptions parse_training(const json& j, const ModelConfig& model,
                               const std::string& base_dir) {
  const std::string P = "training";
  jr::require_object(j, P, "{\"seq_len\": 4096, \"batch_per_rank\": 1}");
  check_fields(j, P);
  jr::require_field(j, P, "seq_len", "add \"seq_len\": <tokens per sequence>, e.g. 4096");
  TrainingOptions t;
  if (j.contains("batch_per_rank"))
    t.batch_per_rank = field_int(j, P, "batch_per_rank", 1, kMaxSize, "1");
  t.seq_len = field_int(j, P, "seq_len", 1, kMaxSize, "4096");
  if (model.arch == ModelArch::kGpt2 && t.seq_len > model.max_seq_len)
    throw InputError(
        "training.seq_len",
        "is " + std::to_string(t.seq_len) + " but model '" + model.name +
            "' has learned positions for " + std::to_string(model.max_seq_len) +
            " tokens (model.max_seq_len)",
        "use seq_len <= " + std::to_string(model.max_seq_len) + ", or raise model.max_seq_len");
  if (j.contains("steps")) t.steps = static_cast<int>(field_int(j, P, "steps", 1, kMaxInt, "2"));
  if (j.contains("grad_accum_steps"))
    t.grad_accum_steps = static_cast<int>(field_int(j, P, "grad_accum_steps", 1, kMaxInt, "4"));
  if (j.contains("generate_every"))
    t.generate_every = static_cast<int>(field_int(j, P, "generate_every", 1, kMaxInt, "1"));
  if (j.contains("grad_sync_during_accumulation")) {
    const std::string v =
        jr::get_choice(j.at("grad_sync_during_accumulation"), P + ".grad_sync_during_accumulation",
                       {"none", "reduce_scatter", "all"});
    t.accumulation_sync = v == "all"              ? AccumulationSync::kAll
                          : v == "reduce_scatter" ? AccumulationSync::kReduceScatter
                                                  : AccumulationSync::kNone;
  }
  if (j.contains("reshard_after_backward_during_accumulation"))
    t.reshard_after_backward_during_accumulation =
        jr::get_bool(j.at("reshard_after_backward_during_accumulation"),
                     P + ".reshard_after_backward_during_accumulation");
  if (j.contains("activation_checkpointing"))
    t.activation_checkpointing = parse_activation_checkpointing(j.at("activation_checkpointing"));
  if (j.contains("optimizer")) t.optimizer = parse_optimizer(j.at("optimizer"));
  if (j.contains("rank_batch")) {
    // [{"rank": 3, "batch": 1}, ...]: ranks whose micro-batch differs from batch_per_rank (an
    // uneven batch); ranks are checked against the world size once the hardware is known.
    const std::string R = "training.rank_batch";
    const json& v = j.at("rank_batch");
    if (!v.is_array())
      throw InputError(R, "is " + jr::describe(v) + ", not an array",
                       "write a list such as [{\"rank\": 1, \"batch\": 2}]");
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string at = jr::index_path(R, i);
      jr::require_object(v[i], at, "{\"rank\": 1, \"batch\": 2}");
      jr::reject_unknown_fields(v[i], at, scenario_fields().at(R));
      jr::require_field(v[i], at, "rank", "add \"rank\": the global rank whose batch differs");
      jr::require_field(v[i], at, "batch", "add \"batch\": its sequences per micro-batch, e.g. 2");
      const int rank =
          static_cast<int>(jr::get_int(v[i].at("rank"), at + ".rank", 0, kMaxInt, "1"));
      const int64_t batch = jr::get_int(v[i].at("batch"), at + ".batch", 1, kMaxSize, "2");
      if (!t.rank_batch.emplace(rank, batch).second)
        throw InputError(at + ".rank", "is " + std::to_string(rank) + ", given twice",
                         "give each rank once");
    }
  }
  if (j.contains("data")) t.data = parse_data(j.at("data"), base_dir);
  if (j.contains("checkpoint")) t.checkpoint = parse_checkpoint_save(j.at("checkpoint"));
  if (j.contains("float8")) t.float8 = parse_float8(j.at("float8"));  // float8_checks.h
  if (j.contains("init")) {
    const std::string v =
        jr::get_choice(j.at("init"), P + ".init", {"meta", "device", "broadcast_from_rank0"});
    t.init = v == "device"                 ? ModelInit::kDevice
             : v == "broadcast_from_rank0" ? ModelInit::kBroadcastFromRank0
                                           : ModelInit::kMeta;
  }
  if (j.contains("frozen")) t.frozen = parse_frozen(j.at("frozen"));
  if (j.contains("frozen_dtype")) {
    t.frozen_dtype = parse_frozen_dtype(j.at("frozen_dtype"));
    t.nf4.enabled = j.at("frozen_dtype") == "nf4";  // QLoRA (scenario_nf4.cc)
  }
  if (j.contains("nf4")) {
    if (!t.nf4.enabled)
      throw InputError(P + ".nf4", "is set but training.frozen_dtype is not \"nf4\"",
                       "remove training.nf4, or set training.frozen_dtype to \"nf4\"");
    parse_nf4(j.at("nf4"), t.nf4);
  }
  if (j.contains("orig_dtype"))  // NOTE [Original dtype] in core/fsdp/fsdp_param_group.cc
    t.orig_dtype = jr::get_choice(j.at("orig_dtype"), P + ".orig_dtype", {"fp32", "bf16"}) == "bf16"
                       ? DType::kBFloat16
                       : DType::kFloat32;
  if (j.contains("seed")) {
    const json& s = j.at("seed");
    t.seed = s.is_number_unsigned()
                 ? s.get<uint64_t>()
                 : static_cast<uint64_t>(jr::get_int(s, "training.seed", 0,
                                                     std::numeric_limits<int64_t>::max(), "1234"));
  }
  return t;
}

}  // namespace fullshard::scenario_detail
