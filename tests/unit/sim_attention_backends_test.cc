// model.implementation attention = cudnn: the backward takes cuDNN's workspace (the frontend's
// dQ_accum and softmax_sum and the plan's own, NOTE [cuDNN SDPA workspace] in
// core/runtime/cudnn_sdpa_workspace.cc) from the caching allocator as one block while its kernel
// runs; the forward takes none, and flash's backward allocates no such block.
#include <gtest/gtest.h>

#include "core/runtime/cudnn_sdpa_workspace.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using nlohmann::json;
using testing::TinyOptions;

struct WorkspaceBlocks {
  int count = 0;
  std::vector<uint64_t> bytes;  // allocated-bytes step at each workspace allocation
};

// Every allocation named "... sdpa workspace" in rank class 0's full timeline.
WorkspaceBlocks workspace_blocks(const std::string& attention, int batch, int seq) {
  TinyOptions o;
  o.mesh = {1};
  o.steps = 1;
  o.batch = batch;
  o.seq = seq;
  json j = testing::tiny_scenario_json(o);
  j["model"] = {{"name", "tiny-llama"}, {"implementation", {{"attention", attention}}}};
  sim::SimulateOptions so;
  so.max_timeline_points = 1u << 30;  // every allocation
  const sim::SimulationReport r = sim::simulate_scenario(parse_scenario(j), so);
  EXPECT_TRUE(r.ok()) << testing::problems_text(r);
  const auto& c = r.classes.at(0);
  WorkspaceBlocks w;
  for (size_t i = 1; i < c.timeline.size(); ++i) {
    const auto& p = c.timeline[i];
    if (p.what < 0 || !p.is_alloc) continue;
    const std::string& name = c.timeline_names.at(static_cast<size_t>(p.what));
    if (name.find("sdpa") == std::string::npos || name.find(" workspace") == std::string::npos)
      continue;
    ++w.count;
    w.bytes.push_back(p.allocated_bytes - c.timeline[i - 1].allocated_bytes);
  }
  return w;
}

TEST(AttentionBackends, CudnnBackwardTakesTheFrontendWorkspace) {
  // tiny-llama: 2 layers, 4 query heads of head dim 16 (dim 64), 2 kv heads.
  for (const auto& [batch, seq] : {std::pair{2, 32}, std::pair{1, 24}, std::pair{3, 40}}) {
    const WorkspaceBlocks w = workspace_blocks("cudnn", batch, seq);
    ASSERT_EQ(w.count, 2) << "one block per layer's backward, none in forward";
    // The model's block, rounded to the allocator's 512 B.
    const uint64_t raw =
        static_cast<uint64_t>(cudnn_sdpa_workspace(true, batch, seq, 4, 16).total());
    for (uint64_t b : w.bytes)
      EXPECT_EQ(b, (raw + 511) / 512 * 512) << "batch " << batch << " seq " << seq;
  }
  // By hand at batch 2, seq 32: dQ_accum + softmax_sum 2*4*32*(16+1)*4 = 17408 B, the padding-mask
  // workaround's 2*8 B (32 % 128 != 0), the engine's 2*4*128*16*4 + 256 = 65792 B: 83216 B, 83456
  // once rounded.
  EXPECT_EQ(workspace_blocks("cudnn", 2, 32).bytes.at(0), 83456u);
  EXPECT_EQ(workspace_blocks("flash", 2, 32).count, 0);
}

}  // namespace
}  // namespace fullshard
