// torch._foreach_norm's scratch in clip_grad_norm_ (NOTE [foreach_norm scratch] in
// core/optim/adamw.cc): one fp32 temporary of ntensors x max_chunks_per_tensor elements (65536
// elements a chunk), allocated before the per-gradient norms and freed after the op; none when
// the gradients live on the host (CPU offload) or without clipping.
#include <gtest/gtest.h>

#include "core/optim/foreach_norm.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using testing::TinyOptions;

struct Scratch {
  int allocations = 0;
  uint64_t step = 0;         // allocated-bytes step of the (last) allocation
  bool freed_after = false;  // a later point drops the temporaries by that step
};

// `model`: a preset name, or null for o.model.
Scratch scratch_of(const TinyOptions& o, const nlohmann::json& model = nullptr) {
  sim::SimulateOptions so;
  so.max_timeline_points = 1u << 30;  // every allocation
  nlohmann::json j = testing::tiny_scenario_json(o);
  if (!model.is_null()) j["model"] = model;
  const sim::SimulationReport r = sim::simulate_scenario(parse_scenario(j), so);
  EXPECT_TRUE(r.ok()) << testing::problems_text(r);
  const auto& c = r.classes.at(0);
  Scratch s;
  const auto temp = static_cast<size_t>(MemCategory::kTemporary);
  for (size_t i = 1; i < c.timeline.size(); ++i) {
    const auto& p = c.timeline[i];
    const std::string name = p.what >= 0 ? c.timeline_names.at(static_cast<size_t>(p.what)) : "";
    if (name != "clip_grad_norm _foreach_norm output_per_tensor") continue;
    const uint64_t before = c.timeline[i - 1].by_category[temp], after = p.by_category[temp];
    if (after <= before) continue;
    ++s.allocations;
    s.step = after - before;
    for (size_t j = i + 1; j < c.timeline.size(); ++j)
      if (c.timeline[j].by_category[temp] + s.step <= c.timeline[j - 1].by_category[temp])
        s.freed_after = true;
  }
  return s;
}

uint64_t round512(uint64_t b) { return (b + 511) / 512 * 512; }

TEST(ForeachNormScratch, SizeFollowsTheLargestGradientShard) {
  EXPECT_EQ(foreach_norm_scratch_numel({}), 0);
  EXPECT_EQ(foreach_norm_scratch_numel({1}), 1);
  EXPECT_EQ(foreach_norm_scratch_numel({65536, 3}), 2);
  EXPECT_EQ(foreach_norm_scratch_numel({65537, 3, 0}), 6);
  EXPECT_EQ(foreach_norm_scratch_numel({10, 3 * 65536}), 6);
}

// A Llama whose embedding shard spans many chunks: vocab 40001 x dim 64 over ranks r shards to
// ceil(40001 / r) x 64 elements; 2 blocks of 9 parameters plus embedding, norm and output.
TEST(ForeachNormScratch, ClipAllocatesNTensorsTimesMaxChunksOnTheDevice) {
  for (int world : {1, 2, 3}) {
    TinyOptions o;
    o.mesh = {world};
    o.steps = 1;
    Scratch none = scratch_of(o);  // tiny-llama: every shard below one chunk
    EXPECT_EQ(none.allocations, 1);
    EXPECT_EQ(none.step, round512(21 * 4));
    const auto model = nlohmann::json{{"arch", "llama"}, {"vocab_size", 40001}, {"dim", 64},
                                      {"n_layers", 2},   {"n_heads", 4},        {"n_kv_heads", 2},
                                      {"ffn_dim", 128},  {"max_seq_len", 64}};
    const Scratch s = scratch_of(o, model);
    const int64_t shard = (40001 + world - 1) / world * 64, chunks = (shard + 65535) / 65536;
    EXPECT_EQ(s.allocations, 1) << "world " << world;
    EXPECT_EQ(s.step, round512(static_cast<uint64_t>(21 * chunks * 4))) << "world " << world;
    EXPECT_TRUE(s.freed_after) << "world " << world;
  }
}

TEST(ForeachNormScratch, NoneWithCpuOffloadOrWithoutClipping) {
  TinyOptions o;
  o.cpu_offload = true;
  EXPECT_EQ(scratch_of(o).allocations, 0);
  o.cpu_offload = false;
  o.max_grad_norm = 0;
  EXPECT_EQ(scratch_of(o).allocations, 0);
}

}  // namespace
}  // namespace fullshard
