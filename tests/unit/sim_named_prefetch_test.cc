// fsdp.per_unit.<unit>.forward_prefetch / backward_prefetch: set_modules_to_forward_prefetch /
// set_modules_to_backward_prefetch with named units (core/train/apply_fsdp.cc,
// set_named_prefetch). Lists that spell out "the next N units" play exactly as the counts do;
// other lists move the peak; bad lists are one error naming the field.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "core/common/error.h"
#include "simulator/simulate.h"

namespace fullshard::sim {
namespace {

using nlohmann::json;

json scenario(int layers) {
  return {{"model",
           {{"arch", "llama"},
            {"name", "prefetch-llama"},
            {"vocab_size", 256},
            {"dim", 64},
            {"n_layers", layers},
            {"n_heads", 4},
            {"n_kv_heads", 2},
            {"ffn_dim", 128},
            {"max_seq_len", 64}}},
          {"training", {{"batch_per_rank", 2}, {"seq_len", 64}, {"steps", 2}}},
          {"fsdp", {{"mesh", {{"shape", {2}}}}}},
          {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", 2}}}};
}

SimulationReport run(const json& j) {
  SimulationReport r = simulate_scenario(parse_scenario(j));
  EXPECT_TRUE(r.ok());
  return r;
}

void expect_same(const SimulationReport& a, const SimulationReport& b) {
  ASSERT_EQ(a.classes.size(), b.classes.size());
  for (size_t i = 0; i < a.classes.size(); ++i) {
    EXPECT_EQ(a.classes[i].peak_allocated_bytes, b.classes[i].peak_allocated_bytes);
    EXPECT_EQ(a.classes[i].peak_reserved_bytes, b.classes[i].peak_reserved_bytes);
  }
  EXPECT_DOUBLE_EQ(a.step_time_s, b.step_time_s);
}

TEST(NamedPrefetch, ListsOfTheNextUnitsPlayAsTheCounts) {
  const int layers = 5;
  for (int n : {1, 2}) {
    json counts = scenario(layers);
    counts["fsdp"]["forward_prefetch"] = n;
    counts["fsdp"]["backward_prefetch"] = n;
    json named = scenario(layers);
    json per_unit = json::object();
    for (int i = 0; i < layers; ++i) {
      json fwd = json::array(), bwd = json::array();
      for (int k = 1; k <= n && i + k < layers; ++k)
        fwd.push_back("layers." + std::to_string(i + k));
      for (int k = 1; k <= n && i - k >= 0; ++k) bwd.push_back("layers." + std::to_string(i - k));
      json u = json::object();
      if (!fwd.empty()) u["forward_prefetch"] = fwd;
      if (n > 1 && !bwd.empty()) u["backward_prefetch"] = bwd;  // n == 1: the implicit one
      if (!u.empty()) per_unit["layers." + std::to_string(i)] = u;
    }
    if (n > 1) {  // the counts' root list: the last n blocks
      json r = json::array();
      for (int k = 1; k <= n; ++k) r.push_back("layers." + std::to_string(layers - k));
      per_unit["root"] = {{"backward_prefetch", r}};
    }
    named["fsdp"]["per_unit"] = per_unit;
    SCOPED_TRACE("n = " + std::to_string(n));
    expect_same(run(counts), run(named));
  }
}

// Block 0 prefetching every other block in forward holds all of them unsharded at once (blocks
// kept unsharded after forward): the peak does not fall.
TEST(NamedPrefetch, PrefetchingEveryBlockRaisesThePeak) {
  const int layers = 4;
  json all = scenario(layers);
  all["fsdp"]["reshard_after_forward"] = false;
  json base = all;
  all["fsdp"]["per_unit"] = {
      {"layers.0", {{"forward_prefetch", {"layers.1", "layers.2", "layers.3"}}}}};
  EXPECT_GE(run(all).classes.front().peak_allocated_bytes,
            run(base).classes.front().peak_allocated_bytes);
  // An empty backward list is FSDP2's implicit prefetch.
  json empty = scenario(layers);
  empty["fsdp"]["per_unit"] = {{"layers.2", {{"backward_prefetch", json::array()}}}};
  expect_same(run(scenario(layers)), run(empty));
}

TEST(NamedPrefetch, BadListsNameTheField) {
  auto error_of = [](json per_unit) {
    json j = scenario(3);
    j["fsdp"]["per_unit"] = per_unit;
    try {
      parse_scenario(j);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error_of({{"layers.0", {{"forward_prefetch", {"layers.0"}}}}})
                .find("fsdp.per_unit.layers.0.forward_prefetch[0]"),
            std::string::npos);
  EXPECT_NE(
      error_of({{"layers.0", {{"forward_prefetch", {"layers.1", "layers.-2"}}}}}).find("twice"),
      std::string::npos);
  EXPECT_NE(error_of({{"layers.0", {{"backward_prefetch", "layers.1"}}}}).find("not a list"),
            std::string::npos);
  EXPECT_NE(error_of({{"layers.0", {{"forward_prefetch", {"layers.7"}}}}}).find("block 7"),
            std::string::npos);
  EXPECT_NE(error_of({{"layers.1", json::object()}}).find("sets nothing"), std::string::npos);
}

// training.reshard_after_backward_during_accumulation false: with 3 micro-batches, units kept
// unsharded after the first two backwards skip the next forward's all-gathers (FSDP2's unshard
// is a no-op on an unsharded group), so each step all-gathers fewer times.
TEST(ReshardAfterBackward, AccumulationWithoutReshardAllGathersLess) {
  auto run_with = [](bool reshard) {
    json j = scenario(3);
    j["training"]["grad_accum_steps"] = 3;
    j["training"]["reshard_after_backward_during_accumulation"] = reshard;
    return run(j);
  };
  const SimulationReport on = run_with(true);
  const SimulationReport off = run_with(false);
  const int ag = static_cast<int>(CollectiveKind::kAllGather);
  ASSERT_FALSE(on.classes.empty());
  ASSERT_FALSE(off.classes.empty());
  // 3 blocks and the root: one forward all-gather each saved on micro-batches 2 and 3.
  EXPECT_EQ(
      on.classes.front().collectives_per_step[ag] - off.classes.front().collectives_per_step[ag],
      2 * 4);
  // The units kept unsharded are resharded after the next forward (reshard_after_forward), before
  // the activations peak: the peak does not fall.
  EXPECT_GE(off.classes.front().peak_allocated_bytes, on.classes.front().peak_allocated_bytes);
}

// fsdp.per_unit.tok_embeddings.unshard_in_backward false (FSDPModule.set_unshard_in_backward):
// the embedding's own unit is not all-gathered in backward (its backward reads no parameter), so
// each step issues one all-gather fewer and the peak does not rise; any other unit is refused.
TEST(UnshardInBackward, TheEmbeddingUnitSkipsItsBackwardAllGather) {
  auto run_with = [](bool unshard) {
    json j = scenario(3);
    j["fsdp"]["units"] = "embed_blocks_head";
    if (!unshard) j["fsdp"]["per_unit"] = {{"tok_embeddings", {{"unshard_in_backward", false}}}};
    return run(j);
  };
  const SimulationReport on = run_with(true);
  const SimulationReport off = run_with(false);
  const int ag = static_cast<int>(CollectiveKind::kAllGather);
  ASSERT_FALSE(on.classes.empty());
  EXPECT_EQ(
      on.classes.front().collectives_per_step[ag] - off.classes.front().collectives_per_step[ag],
      1);
  EXPECT_LE(off.classes.front().peak_allocated_bytes, on.classes.front().peak_allocated_bytes);
  json bad = scenario(3);
  bad["fsdp"]["units"] = "embed_blocks_head";
  bad["fsdp"]["per_unit"] = {{"layers.0", {{"unshard_in_backward", false}}}};
  try {
    parse_scenario(bad);
    FAIL() << "unshard_in_backward false on a block was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fsdp.per_unit.layers.0.unshard_in_backward"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fullshard::sim
