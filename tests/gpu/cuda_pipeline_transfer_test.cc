// Host-only (no GPU): the CUDA backend's pipeline transfers as far as the host decides them
// (backends/cuda/pipeline_transfer.h, NOTE [Pipeline p2p on the CUDA backend]): which end of a
// channel a rank is (ncclSend or ncclRecv, the peer's group rank) and what is refused; and the
// order the ranks create their channels' NCCL communicators in, each creation blocking until both
// members arrive: over every schedule at pp 2, 3 and 4 (1 and 2 stages per rank, dp 1 and 2) and
// the shipped pp scenario, every rank's list created in that order completes, and a deliberately
// inconsistent order is caught deadlocking (so the check can fail).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cuda/pipeline_transfer.h"
#include "backends/cuda/stream_set.h"
#include "core/train/pipeline_p2p.h"
#include "core/common/error.h"
#include "core/scenario/scenario.h"
#include "core/train/pipeline_program.h"

namespace fullshard::cuda {
namespace {

using json = nlohmann::json;

backends::CollectiveArgs broadcast(int root = 0) {
  backends::CollectiveArgs a;
  a.kind = CollectiveKind::kBroadcast;
  a.root = root;
  a.count = 16;
  a.name = "pipeline p2p F 0->1 microbatch 0";
  return a;
}

TEST(CudaPipelineTransfer, SenderIsGroupRankZeroAndTheReceiverItsPeer) {
  const ProcessGroup f{"pipeline p2p F 0->1", {2, 5}}, b{"pipeline p2p B 1->0", {5, 2}};
  const PipelineTransfer s = pipeline_transfer(broadcast(), f, 2),
                         r = pipeline_transfer(broadcast(), f, 5);
  EXPECT_TRUE(s.send);
  EXPECT_EQ(s.peer, 1);
  EXPECT_FALSE(r.send);
  EXPECT_EQ(r.peer, 0);
  EXPECT_TRUE(pipeline_transfer(broadcast(), b, 5).send);  // the gradient flows back
  EXPECT_FALSE(pipeline_transfer(broadcast(), b, 2).send);
  EXPECT_NE(pipeline_channel_key(f),
            pipeline_channel_key(ProcessGroup{"pipeline p2p F 2->3", {2, 5}}));
  auto refused = [](const backends::CollectiveArgs& a, const ProcessGroup& g, int rank) {
    try {
      pipeline_transfer(a, g, rank);
    } catch (const InternalError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused(broadcast(1), f, 2).find("not a broadcast from group rank 0"),
            std::string::npos);
  EXPECT_NE(refused(broadcast(), f, 3).find("with rank 3"), std::string::npos);
  EXPECT_NE(refused(broadcast(), ProcessGroup{"pipeline p2p F 0->1", {2, 2}}, 2).find("two ranks"),
            std::string::npos);
  backends::CollectiveArgs ag = broadcast();
  ag.kind = CollectiveKind::kAllGather;
  EXPECT_NE(refused(ag, f, 2).find("pipeline transfer"), std::string::npos);
}

// Each rank creates its channels in `order[rank]`; a creation completes once both members are at
// it. True when every rank gets through its list.
bool creations_complete(const std::map<int, std::vector<ProcessGroup>>& order) {
  std::map<int, size_t> at;
  auto key = [](const ProcessGroup& g) { return pipeline_channel_key(g); };
  for (bool progress = true; progress;) {
    progress = false;
    for (const auto& [rank, list] : order) {
      if (at[rank] >= list.size()) continue;
      const ProcessGroup& g = list[at[rank]];
      const int peer = g.ranks[0] == rank ? g.ranks[1] : g.ranks[0];
      const auto& other = order.at(peer);
      if (at[peer] < other.size() && key(other[at[peer]]) == key(g)) {
        ++at[rank];
        ++at[peer];
        progress = true;
      }
    }
  }
  for (const auto& [rank, list] : order)
    if (at[rank] != list.size()) return false;
  return true;
}

json pp_scenario(const std::string& schedule, int pp, int dp, int layers) {
  return {{"name", "pp"},
          {"model", {{"name", "tiny-llama"}, {"n_layers", layers}}},
          {"training", {{"batch_per_rank", 8}, {"seq_len", 32}, {"steps", 1}}},
          {"fsdp", {{"mesh", {{"shape", {pp, dp}}, {"dim_names", {"pp", "dp_shard"}}}}}},
          {"pipeline_parallel", {{"schedule", schedule}, {"microbatch_size", 1}}},
          {"hardware", {{"profile", "cpu"}, {"nodes", 1}, {"gpus_per_node", pp * dp}}}};
}

TEST(CudaPipelineTransfer, ChannelCreationInTheAgreedOrderNeverDeadlocks) {
  int shapes = 0;
  auto check = [&](const json& j, const std::string& what) {
    const Scenario s = parse_scenario(j);
    std::map<int, std::vector<ProcessGroup>> agreed, inconsistent;
    size_t channels = 0;
    for (int r = 0; r < s.world_size(); ++r) {
      agreed[r] = pipeline_channel_order(pipeline_p2p_groups(s, r), r);
      channels += agreed[r].size();
      inconsistent[r] = agreed[r];
      const int pp_index = r / (s.world_size() / s.pipeline.degree);  // mesh [pp, dp_shard]
      if (pp_index % 2 == 1) std::reverse(inconsistent[r].begin(), inconsistent[r].end());
      for (const ProcessGroup& g : agreed[r]) EXPECT_GE(g.index_of(r), 0) << what;
    }
    EXPECT_GT(channels, 0u) << what;
    EXPECT_TRUE(creations_complete(agreed)) << what;
    // Odd pp ranks walking their lists backwards: some pair waits on each other wherever a rank
    // has two channels with one peer.
    bool pair_with_two = false;
    for (const auto& [r, list] : agreed)
      for (size_t a = 0; a < list.size(); ++a)
        for (size_t b = a + 1; b < list.size(); ++b)
          pair_with_two =
              pair_with_two || list[a].ranks == list[b].ranks ||
              (list[a].ranks[0] == list[b].ranks[1] && list[a].ranks[1] == list[b].ranks[0]);
    if (pair_with_two) EXPECT_FALSE(creations_complete(inconsistent)) << what;
    ++shapes;
  };
  for (const char* schedule : {"GPipe", "1F1B"})
    for (int pp : {2, 3, 4})
      for (int dp : {1, 2})
        check(pp_scenario(schedule, pp, dp, 4),
              std::string(schedule) + " pp " + std::to_string(pp));
  for (const char* schedule :
       {"Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"})
    for (int pp : {2, 4})
      check(pp_scenario(schedule, pp, 1, 8), std::string(schedule) + " pp " + std::to_string(pp));
  std::ifstream f(std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/tiny-llama-pp2-fsdp2-cpu4.json");
  check(json::parse(f), "tiny-llama-pp2-fsdp2-cpu4");
  EXPECT_EQ(shapes, 12 + 10 + 1);
}

// The optional streams a rank counts against the hardware queues (optional_streams_used) are the
// p2p streams its program picks for its two neighbours (pipeline_p2p_stream), plus cp's.
TEST(CudaPipelineTransfer, OptionalStreamsCountThePeersStreams) {
  for (int pp = 1; pp <= 8; ++pp)
    for (int r = 0; r < pp; ++r) {
      std::set<StreamRole> roles;
      if (pp > 1)
        for (int peer : {(r + 1) % pp, (r + pp - 1) % pp})
          roles.insert(pipeline_p2p_stream(r, peer, pp));
      EXPECT_EQ(optional_streams_used(pp, 1), static_cast<int>(roles.size()))
          << "pp " << pp << " rank " << r;
      EXPECT_EQ(optional_streams_used(pp, 2), static_cast<int>(roles.size()) + 1);
    }
  EXPECT_EQ(optional_streams_used(1, 1), 0);
}

}  // namespace
}  // namespace fullshard::cuda
