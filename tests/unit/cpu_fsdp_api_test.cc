// FSDP2 behaviours a training script chooses, simulated and trained on the CPU backend.
// NOTE [World-size-1 shortcut] (core/fsdp/fsdp_param_group.cc): a parameter group whose shard
// group has one rank issues no all-gather and no reduce-scatter (HSDP keeps its replicate
// all-reduce), and the simulator's peaks still equal what the CPU backend measures; HSDP with
// one-rank shard groups trains as the unsharded job does.
// NOTE [Post-optimizer event] (core/fsdp/fully_shard.cc): fsdp.post_optim_event lets the first
// all-gathers of a step overlap the batch load; memory is unchanged.
// NOTE [Async unshard] (core/fsdp/fsdp_param_group.cc): FSDPModule.unshard(async_op) before the
// forward: the pre-forward all-gathers nothing again; where the all-gather runs and which stream
// waits for what; fsdp.unshard trains with predicted == measured.
// NOTE [Hooks' async unshard] (core/fsdp/fsdp_param_group.cc): fsdp.unshard_async_op moves every
// unit's copy-in to the current stream and its all-gather to the process group's stream;
// predicted == measured.
// NOTE [Forward methods] (core/fsdp/fully_shard.cc): model.generate() unregistered reads the
// root's sharded parameters and fails naming register_fsdp_forward_method; registered, the root's
// hooks all-gather around it; training.generate_every keeps predicted == measured.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "tests/support/cpu_support.h"
#include "tests/support/prop_support.h"
#include "tests/support/sim_support.h"
#include "tests/gpu/recorded_ops.h"
#include "core/train/apply_fsdp.h"

namespace fullshard {
namespace {
using namespace fullshard::testing;
using nlohmann::json;

json scenario(std::vector<int> mesh, bool offload = false) {
  TinyOptions o;
  o.mesh = std::move(mesh);
  o.batch = 2;
  o.seq = 8;
  o.cpu_offload = offload;
  o.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  json j = tiny_scenario_json(o);
  j["model"] = {{"arch", "llama"}, {"name", "w1"},  {"vocab_size", 256}, {"dim", 8},
                {"n_layers", 2},   {"n_heads", 2},  {"n_kv_heads", 1},   {"ffn_dim", 12},
                {"max_seq_len", 16}};
  j["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}, {"max_grad_norm", 1.0}};
  j["training"]["seed"] = 5;
  return j;
}

struct Played {
  std::map<CollectiveKind, int> last_step;  // rank 0's collectives in the last step, by kind
  // Whether the first copy-in stream wait after the last step's batch load waits on an event
  // recorded before that load (the post-optimizer event) rather than after it.
  bool all_gather_waits_before_load = false;
  sim::SimulationReport report;
};

Played play(const json& j) {
  Played p;
  sim::SimulateOptions o;
  o.on_played = [&](const sim::PlayedRun& run) {
    const auto& prog = run.programs.front();
    const int last = prog.instrs.back().step;
    size_t load = 0;
    std::map<uint64_t, size_t> recorded;  // event -> index of its record
    for (size_t i = 0; i < prog.instrs.size(); ++i) {
      const auto& in = prog.instrs[i];
      if (in.type == sim::InstrType::kKernel && in.op == OpKind::kLoadBatch) load = i;
      if (in.type == sim::InstrType::kRecordEvent) recorded[in.event] = i;
      if (in.step == last && in.type == sim::InstrType::kCollective) ++p.last_step[in.coll];
    }
    for (size_t i = load; i < prog.instrs.size(); ++i) {
      const auto& in = prog.instrs[i];
      if (in.type != sim::InstrType::kWaitEvent || in.stream != StreamRole::kAllGatherCopyIn)
        continue;
      p.all_gather_waits_before_load = recorded.at(in.event) < load;
      break;
    }
  };
  p.report = sim::simulate_scenario(parse_scenario(j), o);
  EXPECT_TRUE(p.report.ok()) << problems_text(p.report);
  return p;
}

TEST(WorldSizeOne, NoAllGatherOrReduceScatter) {
  for (bool offload : {false, true}) {
    const Played one = play(scenario({1}, offload));
    EXPECT_EQ(one.last_step.count(CollectiveKind::kAllGather), 0u) << offload;
    EXPECT_EQ(one.last_step.count(CollectiveKind::kReduceScatter), 0u) << offload;
    EXPECT_EQ(one.last_step.count(CollectiveKind::kAllReduce), 0u) << offload;
  }
  // HSDP over one-rank shard groups: only the replicate all-reduces, one per unit with
  // gradients (the two blocks and the root) and none for the all-gathers.
  const Played hsdp = play(scenario({2, 1}));
  EXPECT_EQ(hsdp.last_step.count(CollectiveKind::kAllGather), 0u);
  EXPECT_EQ(hsdp.last_step.count(CollectiveKind::kReduceScatter), 0u);
  ASSERT_EQ(hsdp.last_step.count(CollectiveKind::kAllReduce), 1u);
  EXPECT_GE(hsdp.last_step.at(CollectiveKind::kAllReduce), 3);
  // The same job sharded over 2 ranks all-gathers and reduce-scatters.
  const Played two = play(scenario({2}));
  EXPECT_GT(two.last_step.at(CollectiveKind::kAllGather), 0);
  EXPECT_GT(two.last_step.at(CollectiveKind::kReduceScatter), 0);
}

TEST(WorldSizeOne, PredictedPeakMemoryEqualsMeasured) {
  predicted_peaks_equal_measured(parse_scenario(scenario({1})));
  predicted_peaks_equal_measured(parse_scenario(scenario({1}, true)));
  json raf = scenario({2, 1});
  raf["fsdp"]["reshard_after_forward"] = false;
  predicted_peaks_equal_measured(parse_scenario(raf));
  json accum = scenario({2, 1});
  accum["training"]["grad_accum_steps"] = 2;
  accum["training"]["grad_sync_during_accumulation"] = "reduce_scatter";
  predicted_peaks_equal_measured(parse_scenario(accum));
}

// The copy that replaces the reduce-scatter divides by a set gradient_divide_factor: with a
// factor of 2 on mesh [2, 1] (a summing all-reduce) the gradients are the same as the default
// average over the 2 replicas, so training matches the unsharded job.
TEST(WorldSizeOne, HsdpEqualsUnsharded) {
  json j = scenario({2, 1});
  j["fsdp"]["mixed_precision"] = json::object();  // fp32: NOTE [fp32 tolerance]
  sharded_equals_unsharded(j, unsharded_job(j, 2));
  const json ref = unsharded_job(j, 2);
  j["fsdp"]["gradient_divide_factor"] = 2.0;
  sharded_equals_unsharded(j, ref);
}

json h100(json j) {
  j["hardware"]["profile"] = "h100-sxm-80gb";
  j["training"]["seq_len"] = 16;
  return j;
}

TEST(PostOptimEvent, AllGatherWaitsOnTheEvent) {
  for (std::vector<int> mesh : {std::vector<int>{2}, std::vector<int>{2, 1}}) {
    json j = h100(scenario(mesh));
    const Played plain = play(j);
    j["fsdp"]["post_optim_event"] = true;
    const Played event = play(j);
    ASSERT_EQ(plain.report.classes.size(), event.report.classes.size());
    for (size_t i = 0; i < plain.report.classes.size(); ++i) {
      EXPECT_EQ(plain.report.classes[i].peak_allocated_bytes,
                event.report.classes[i].peak_allocated_bytes);
      EXPECT_EQ(plain.report.classes[i].peak_reserved_bytes,
                event.report.classes[i].peak_reserved_bytes);
    }
    // The step's first copy-in waits on the event recorded after the optimizer step, before the
    // next batch's load, instead of on everything the current stream ran until the forward. On
    // this tiny model the load ends before the root's hooks issue the all-gather, so the step
    // is no shorter.
    EXPECT_TRUE(event.all_gather_waits_before_load);
    EXPECT_FALSE(plain.all_gather_waits_before_load);
    EXPECT_LE(event.report.step_time_s, plain.report.step_time_s);
  }
}

TEST(PostOptimEvent, TrainsAndPredictedEqualsMeasured) {
  json j = scenario({2});
  j["fsdp"]["post_optim_event"] = true;
  predicted_peaks_equal_measured(parse_scenario(j));
  j["fsdp"]["mixed_precision"] = json::object();  // fp32: NOTE [fp32 tolerance]
  sharded_equals_unsharded(j, unsharded_job(j, 2));
  j["fsdp"]["post_optim_event"] = 1;
  try {
    parse_scenario(j);
    ADD_FAILURE() << "a non-bool post_optim_event parsed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fsdp.post_optim_event"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- FSDPModule.unshard / reshard
// The FSDPModule API on one rank's host program (the simulator's parts): unshard(async_op=True)
// issues the all-gather and leaves it pending; the handle's wait copies out; the step's pre-forward
// then all-gathers nothing again, so over a step each unit all-gathers as often as without the
// explicit unshard. reshard() frees the parameters, and the next forward all-gathers again.
TEST(Unshard, HandleWaitsAndThePreForwardDoesNotAllGatherAgain) {
  const Scenario s = parse_scenario(h100(scenario({2})));
  auto counts = [&](const std::function<void(TrainingProgram&)>& before_step) {
    sim::GroupRegistry groups;
    recorded_ops::RecordingBackend b(s, 0, groups);
    TrainingProgram prog(b, s);
    before_step(prog);
    prog.run_step(0);
    std::map<std::string, int> n;
    for (const auto& st : prog.fsdp().states())
      if (st->group) n[st->group->name()] = st->group->all_gathers_issued();
    return n;
  };
  const auto plain = counts([](TrainingProgram&) {});
  EXPECT_EQ(plain.at("root"), 1);      // forward; the root keeps it unsharded for backward
  EXPECT_EQ(plain.at("layers.0"), 2);  // forward and backward
  for (bool async_op : {true, false}) {
    const auto explicit_unshard = counts([&](TrainingProgram& prog) {
      FSDPRuntime& fsdp = prog.fsdp();
      FSDPState& root = fsdp_unit(prog.model(), fsdp, "root");
      FSDPState& layer = fsdp_unit(prog.model(), fsdp, "layers.0");
      std::optional<UnshardHandle> h = fsdp.unshard(root, async_op);
      fsdp.unshard(layer, async_op);  // its handle dropped: the pre-forward waits
      EXPECT_EQ(h.has_value(), async_op);
      EXPECT_EQ(root.group->all_gathers_issued(), 1);
      EXPECT_EQ(root.group->unshard_pending(), async_op);
      EXPECT_EQ(root.group->is_unsharded(), !async_op);
      if (h) h->wait();
      EXPECT_TRUE(root.group->is_unsharded());
      EXPECT_FALSE(root.group->unshard_pending());
      if (h) h->wait();                // a second wait does nothing
      fsdp.unshard(root, async_op);     // already unsharded: nothing issued
      EXPECT_EQ(root.group->all_gathers_issued(), 1);
      EXPECT_EQ(layer.group->unshard_pending(), async_op);
    });
    EXPECT_EQ(explicit_unshard, plain) << "async_op " << async_op;
  }
  // reshard() after an unshard: the forward all-gathers the root again.
  const auto resharded = counts([&](TrainingProgram& prog) {
    FSDPState& root = fsdp_unit(prog.model(), prog.fsdp(), "root");
    prog.fsdp().unshard(root, false);
    prog.fsdp().reshard(root);
    EXPECT_FALSE(root.group->is_unsharded());
  });
  EXPECT_EQ(resharded.at("root"), 2);
  EXPECT_EQ(resharded.at("layers.0"), 2);
}

struct UnshardPlay {
  sim::SimulationReport report;
  std::map<std::string, int> all_gathers;  // last step, by collective name
  std::map<std::string, StreamRole> copy_in_stream, collective_stream;  // first of the step
  std::map<std::string, std::set<StreamRole>> copy_in_streams;  // every copy-in of the step
  int copy_ins = 0;                                             // in the step
  bool issued_before_load = false;     // the root's all-gather precedes the batch load
  bool current_waits_after_load = false;  // the current stream's wait for it follows the load
  bool ag_streams_wait_copy_out = false;  // both all-gather streams wait on the root's copy-out
};

UnshardPlay play_unshard(const json& j) {
  UnshardPlay p;
  sim::SimulateOptions o;
  o.on_played = [&](const sim::PlayedRun& run) {
    const auto& prog = run.programs.front();
    const int last = prog.instrs.back().step;
    size_t load = 0, root_ag = 0;
    uint64_t root_ag_event = 0, copy_out_event = 0;
    bool after_root_ag = false, after_copy_out = false;
    std::map<uint64_t, int> copy_out_waits;
    for (size_t i = 0; i < prog.instrs.size(); ++i) {
      const auto& in = prog.instrs[i];
      if (in.step != last) continue;
      const std::string name = prog.names[in.name];
      if (in.type == sim::InstrType::kKernel && in.op == OpKind::kLoadBatch && !load) load = i;
      if (in.type == sim::InstrType::kKernel && in.op == OpKind::kAllGatherCopyIn) {
        if (!p.copy_in_stream.count(name)) p.copy_in_stream[name] = in.stream;
        p.copy_in_streams[name].insert(in.stream);
        ++p.copy_ins;
      }
      if (in.type == sim::InstrType::kCollective && in.coll == CollectiveKind::kAllGather) {
        if (!p.collective_stream.count(name)) p.collective_stream[name] = in.stream;
        ++p.all_gathers[name];
        if (name == "root all_gather" && !root_ag) {
          root_ag = i;
          after_root_ag = true;
          continue;
        }
      }
      if (after_root_ag && in.type == sim::InstrType::kRecordEvent) {
        root_ag_event = in.event;  // recorded on the collective's stream right after it
        after_root_ag = false;
      }
      if (in.type == sim::InstrType::kKernel && in.op == OpKind::kAllGatherCopyOut &&
          name == "root all_gather_copy_out" && !copy_out_event)
        after_copy_out = true;
      else if (after_copy_out && in.type == sim::InstrType::kRecordEvent) {
        copy_out_event = in.event;
        after_copy_out = false;
      }
      if (in.type == sim::InstrType::kWaitEvent && in.event == root_ag_event && root_ag_event &&
          in.stream == StreamRole::kDefault)
        p.current_waits_after_load = i > load && load > 0;
      if (in.type == sim::InstrType::kWaitEvent && in.event == copy_out_event && copy_out_event &&
          (in.stream == StreamRole::kAllGather || in.stream == StreamRole::kAllGatherCopyIn))
        ++copy_out_waits[static_cast<uint64_t>(in.stream)];
    }
    p.issued_before_load = root_ag > 0 && load > 0 && root_ag < load;
    p.ag_streams_wait_copy_out = copy_out_waits.size() == 2;
  };
  p.report = sim::simulate_scenario(parse_scenario(j), o);
  EXPECT_TRUE(p.report.ok()) << problems_text(p.report);
  return p;
}

// fsdp.unshard on the simulator: the same all-gathers per step as without it (the pre-forwards
// find the units unsharded or pending). Async: the copy-in on the current stream, the collective
// on the all-gather stream (the process group's own stream), issued before the batch load; the
// current stream waits for it only at the root's pre-forward (after the load), and both
// all-gather streams wait on the copy-out (never deferred). Synchronous: the collective on the
// current stream.
TEST(Unshard, SimulatedStreamsAndWaits) {
  json j = h100(scenario({2}));
  const UnshardPlay plain = play_unshard(j);
  EXPECT_EQ(plain.collective_stream.at("root all_gather"), StreamRole::kAllGather);
  EXPECT_EQ(plain.copy_in_stream.at("root all_gather_copy_in"), StreamRole::kAllGatherCopyIn);
  EXPECT_FALSE(plain.issued_before_load);
  for (bool async_op : {true, false}) {
    j["fsdp"]["unshard"] = {{"modules", {"root", "layers.0"}}, {"async_op", async_op}};
    const UnshardPlay p = play_unshard(j);
    EXPECT_EQ(p.all_gathers, plain.all_gathers) << async_op;
    EXPECT_TRUE(p.issued_before_load) << async_op;
    for (const char* unit : {"root", "layers.0"}) {
      const std::string u = unit;
      EXPECT_EQ(p.copy_in_stream.at(u + " all_gather_copy_in"), StreamRole::kDefault) << u;
      EXPECT_EQ(p.collective_stream.at(u + " all_gather"),
                async_op ? StreamRole::kAllGather : StreamRole::kDefault)
          << u << " " << async_op;
    }
    EXPECT_EQ(p.current_waits_after_load, async_op);
    EXPECT_EQ(p.ag_streams_wait_copy_out, async_op);
  }
}

TEST(Unshard, TrainsAndPredictedEqualsMeasured) {
  for (bool async_op : {true, false}) {
    json j = scenario({2});
    j["fsdp"]["unshard"] = {{"modules", {"root", "layers.-1"}}, {"async_op", async_op}};
    predicted_peaks_equal_measured(parse_scenario(j));
    j["fsdp"]["mixed_precision"] = json::object();  // fp32: NOTE [fp32 tolerance]
    sharded_equals_unsharded(j, unsharded_job(j, 2));
  }
}

TEST(Unshard, BadValuesNameTheField) {
  auto refused = [](json j, const std::string& field) {
    try {
      parse_scenario(j);
      ADD_FAILURE() << j["fsdp"].dump() << " parsed";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  json j = scenario({2});
  j["fsdp"]["unshard"] = {{"modules", {"layers.7"}}};
  refused(j, "fsdp.unshard.modules[0]");
  j["fsdp"]["unshard"] = {{"modules", {"root", "root"}}};
  refused(j, "fsdp.unshard.modules[1]");
  j["fsdp"]["unshard"] = {{"modules", json::array()}};
  refused(j, "fsdp.unshard.modules");
  j["fsdp"]["unshard"] = {{"async_op", true}};
  refused(j, "fsdp.unshard.modules");
  j["fsdp"]["unshard"] = {{"modules", {"root"}}, {"async_op", "yes"}};
  refused(j, "fsdp.unshard.async_op");
  j["fsdp"]["unshard"] = {{"modules", {"root"}}, {"wait", true}};
  refused(j, "fsdp.unshard");
}

// ---------------------------------------------------------------- _set_unshard_async_op
// fsdp.unshard_async_op (NOTE [Hooks' async unshard] in core/fsdp/fsdp_param_group.cc): every
// unit's own and prefetched unshards copy in on the current stream and all-gather on the process
// group's stream, as many all-gathers per step as without it; the forward all-gathers no longer
// overlap compute, so the step is no shorter.
TEST(UnshardAsyncOp, HooksUnshardOnTheCurrentAndProcessGroupStreams) {
  for (bool explicit_prefetch : {false, true}) {
    json j = h100(scenario({2}));
    if (explicit_prefetch) j["fsdp"]["forward_prefetch"] = 1;
    const UnshardPlay plain = play_unshard(j);
    j["fsdp"]["unshard_async_op"] = true;
    const UnshardPlay p = play_unshard(j);
    EXPECT_EQ(p.all_gathers, plain.all_gathers);
    ASSERT_FALSE(p.copy_in_stream.empty());
    // Every copy-in of the step, forward and backward (pre_backward's and the backward
    // prefetch's share the forward's names): the backward re-all-gathers each block.
    EXPECT_EQ(p.copy_ins, plain.copy_ins);
    EXPECT_GT(p.copy_ins, static_cast<int>(p.copy_in_streams.size()));
    for (const auto& [name, streams] : plain.copy_in_streams)
      EXPECT_EQ(streams, std::set<StreamRole>{StreamRole::kAllGatherCopyIn}) << name;
    for (const auto& [name, streams] : p.copy_in_streams)
      EXPECT_EQ(streams, std::set<StreamRole>{StreamRole::kDefault}) << name;
    for (const auto& [name, stream] : p.collective_stream)
      EXPECT_EQ(stream, StreamRole::kAllGather) << name;
    EXPECT_GE(p.report.step_time_s, plain.report.step_time_s) << explicit_prefetch;
  }
}

TEST(UnshardAsyncOp, TrainsAndPredictedEqualsMeasured) {
  // FSDP over 2 ranks; HSDP over one-rank shard groups (NOTE [World-size-1 shortcut]).
  for (std::vector<int> mesh : {std::vector<int>{2}, std::vector<int>{2, 1}}) {
    json j = scenario(mesh);
    j["fsdp"]["unshard_async_op"] = true;
    predicted_peaks_equal_measured(parse_scenario(j));
    j["fsdp"]["mixed_precision"] = json::object();  // fp32: NOTE [fp32 tolerance]
    sharded_equals_unsharded(j, unsharded_job(j, 2));
  }
  json j = scenario({2});
  j["fsdp"]["unshard_async_op"] = "true";
  try {
    parse_scenario(j);
    ADD_FAILURE() << "a non-bool unshard_async_op parsed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fsdp.unshard_async_op"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- register_fsdp_forward_method
TEST(ForwardMethods, UnregisteredFailsRegisteredAllGathersTheRoot) {
  const Scenario s = parse_scenario(h100(scenario({2})));
  auto run = [&](bool registered) {
    sim::GroupRegistry groups;
    recorded_ops::RecordingBackend b(s, 0, groups);
    TrainingProgram prog(b, s);
    prog.run_step(0);
    FSDPRuntime& fsdp = prog.fsdp();
    FSDPState& root = fsdp_unit(prog.model(), fsdp, "root");
    FSDPState& layer = fsdp_unit(prog.model(), fsdp, "layers.0");
    EXPECT_FALSE(root.group->is_unsharded());  // resharded after backward
    if (registered) fsdp.register_fsdp_forward_method(prog.model().root(), "generate");
    EXPECT_EQ(fsdp.is_forward_method(prog.model().root(), "generate"), registered);
    // A module fully_shard did not reach: a no-op, as in FSDP2.
    Module& norm = prog.model().root().child("norm");
    fsdp.register_fsdp_forward_method(norm, "generate");
    EXPECT_FALSE(fsdp.is_forward_method(norm, "generate"));
    const int root_before = root.group->all_gathers_issued();
    const int layer_before = layer.group->all_gathers_issued();
    Tensor tokens = empty_tensor(b, {DType::kInt64, {2, 16}}, MemCategory::kActivation,
                                  StreamRole::kDefault, "prompt");
    std::string error;
    try {
      ExecContext c(b, nullptr, &fsdp);
      prog.model().generate(c, tokens);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!registered) {
      EXPECT_NE(error.find("tok_embeddings.weight used while sharded"), std::string::npos) << error;
      EXPECT_NE(error.find("register_fsdp_forward_method"), std::string::npos) << error;
      EXPECT_EQ(root.group->all_gathers_issued(), root_before);
      return;
    }
    EXPECT_EQ(error, "");
    // The root's pre-forward all-gathered once around the whole method and, reshard_after_forward
    // being False for the root, left it unsharded; the block's own hooks all-gathered it and
    // resharded it after its forward.
    EXPECT_EQ(root.group->all_gathers_issued(), root_before + 1);
    EXPECT_TRUE(root.group->is_unsharded());
    EXPECT_EQ(layer.group->all_gathers_issued(), layer_before + 1);
    EXPECT_FALSE(layer.group->is_unsharded());
    fsdp.reset_iter_state();
    fsdp.reshard(root);
    EXPECT_FALSE(root.group->is_unsharded());
  };
  run(false);
  run(true);
}

TEST(ForwardMethods, ScenarioRefusesAnUnregisteredGenerate) {
  json j = scenario({2});
  j["training"]["generate_every"] = 1;
  try {
    parse_scenario(j);
    ADD_FAILURE() << "generate_every without forward_methods parsed";
  } catch (const InputError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("training.generate_every"), std::string::npos) << w;
    EXPECT_NE(w.find("forward_methods"), std::string::npos) << w;
    EXPECT_EQ(w.find('\n'), std::string::npos) << w;
  }
  // fsdp.units "embed_blocks_head": the root owns no parameter, so nothing stays sharded.
  json units = j;
  units["fsdp"]["units"] = "embed_blocks_head";
  EXPECT_NO_THROW(parse_scenario(units));
  j["fsdp"]["forward_methods"] = {"forward_features"};
  try {
    parse_scenario(j);
    ADD_FAILURE() << "an unknown method parsed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fsdp.forward_methods[0]"), std::string::npos)
        << e.what();
  }
  j["fsdp"]["forward_methods"] = {"generate"};
  EXPECT_NO_THROW(parse_scenario(j));
  j["training"]["generate_every"] = 0;
  try {
    parse_scenario(j);
    ADD_FAILURE() << "generate_every 0 parsed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("training.generate_every"), std::string::npos)
        << e.what();
  }
}

TEST(ForwardMethods, GeneratePassPredictedEqualsMeasured) {
  json j = scenario({2});
  j["training"]["generate_every"] = 1;
  j["fsdp"]["forward_methods"] = {"generate"};
  predicted_peaks_equal_measured(parse_scenario(j));
  json units = scenario({2});
  units["training"]["generate_every"] = 1;
  units["fsdp"]["units"] = "embed_blocks_head";
  predicted_peaks_equal_measured(parse_scenario(units));
}

}  // namespace
}  // namespace fullshard
