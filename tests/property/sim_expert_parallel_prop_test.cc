// Expert parallelism over random ep degrees, meshes (1-D and HSDP), expert counts, tokens and
// top-k: every replica's ranks hold each routed expert exactly once between their expert shards
// (Shard(0) or Shard(1) over efsdp, as the training program places them); the dispatch sizes sum
// to the tokens routed; and a random tiny MoE with ep simulates with no protocol problem.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>

#include "core/fsdp/shard_layout.h"
#include "core/mesh/expert_mesh.h"
#include "core/model/moe_dispatch.h"
#include "core/model/moe_routing.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using nlohmann::json;

// Expert e's slices of one weight [E, F, D] over a shard group of w ranks with ep: ep index k
// holds experts [k E/ep, (k+1) E/ep); efsdp index f (of w / ep) holds rows of those on dim 0,
// or rows [f F / efsdp, ...) of every one on dim 1 when efsdp > E / ep.
RC_GTEST_PROP(ExpertParallelProp, EveryExpertHeldExactlyOncePerReplica, ()) {
  const int ep = *rc::gen::element(1, 2, 4, 8);
  const int efsdp = *rc::gen::inRange(1, 9);
  const int w = ep * efsdp;
  const int64_t local = *rc::gen::inRange(1, 5), E = ep * local;
  const int64_t F = efsdp * *rc::gen::inRange(1, 4);  // even for Shard(1)
  const int replicate = *rc::gen::inRange(1, 3);
  const bool dim1 = efsdp * ep > E;
  for (int rep = 0; rep < replicate; ++rep) {
    ProcessGroup shard{"shard", {}};
    for (int i = 0; i < w; ++i) shard.ranks.push_back(rep * w + i);
    std::vector<std::vector<int>> held(static_cast<size_t>(E), std::vector<int>(F, 0));
    for (int rank : shard.ranks) {
      const ExpertGroups g = expert_groups(shard, rank, ep);
      RC_ASSERT(g.ep.size() == ep && g.efsdp.size() == efsdp);
      const int k = g.ep.index_of(rank), f = g.efsdp.index_of(rank);
      RC_ASSERT(k >= 0 && f >= 0);
      for (int other : g.ep.ranks)
        RC_ASSERT(expert_groups(shard, other, ep).efsdp.ranks != g.efsdp.ranks || other == rank);
      for (int64_t e = 0; e < local; ++e) {
        const int64_t expert = k * local + e;
        if (dim1) {
          for (int64_t r = f * (F / efsdp); r < (f + 1) * (F / efsdp); ++r) ++held[expert][r];
        } else if (e >= shard_row_offset(local, efsdp, f) &&
                   e < shard_row_offset(local, efsdp, f) + shard_rows(local, efsdp, f)) {
          for (int64_t r = 0; r < F; ++r) ++held[expert][r];
        }
      }
    }
    for (const auto& row : held)
      for (int n : row) RC_ASSERT(n == 1);
  }
}

RC_GTEST_PROP(ExpertParallelProp, DispatchSizesSumToTheTokensRouted, ()) {
  const int ep = *rc::gen::element(1, 2, 4, 8);
  const int64_t E = ep * *rc::gen::inRange(1, 5);
  const int64_t K = *rc::gen::inRange<int64_t>(1, E + 1);
  const int64_t N = *rc::gen::inRange(0, 300);
  const double hot = *rc::gen::element(1.0, 1.5, 2.0, 4.0);
  // Dropless, or each expert capped (NOTE [Capacity factor] in core/model/moe_routing.h) (the worst routing spread over ep
  // rank 0's experts); a rank then sends its kept rows and receives at most the bound.
  MoeConfig m;
  m.num_experts = E;
  m.top_k = K;
  m.hot_expert_factor = hot >= 4.0 ? static_cast<double>(E) : hot;
  m.capacity_factor = *rc::gen::element(0.0, 0.5, 1.0, 1.5);
  const auto tpe = assumed_tokens_per_expert(m, N, ep);
  const int64_t cap = expert_capacity(m, N);
  int64_t kept = 0;
  for (int64_t t : tpe) {
    RC_ASSERT(t <= cap);
    kept += t;
  }
  RC_ASSERT(m.drops_tokens() || kept == N * K);
  int64_t total_recv = 0, total_local = 0;
  for (int k = 0; k < ep; ++k) {
    const EpRouting r = ep_routing(tpe, ep, k);
    int64_t sent = 0, recv = 0, local = 0;
    for (int64_t x : r.send_rows) sent += x;
    for (int64_t x : r.recv_rows) recv += x;
    for (int64_t x : r.local_tokens_per_expert) local += x;
    RC_ASSERT(sent == kept);      // every kept slot leaves once
    RC_ASSERT(recv <= max_receive_rows(N, K, E, ep, cap));
    RC_ASSERT(recv == local);     // what arrives is what is computed
    for (int j = 0; j < ep; ++j)  // j sends k what k receives from j
      RC_ASSERT(ep_routing(tpe, ep, j).send_rows[k] == r.recv_rows[j]);
    total_recv += recv;
    total_local += local;
  }
  RC_ASSERT(total_recv == ep * kept);
  RC_ASSERT(total_local == ep * kept);
}

// NOTE [Expert load] (core/model/moe_routing.h): any shares route exactly N K tokens, none
// more than N to an expert, and an expert the cap does not reach gets its share within one
// token (largest remainder) when no expert is capped.
RC_GTEST_PROP(ExpertParallelProp, ExpertLoadRoutesEveryTokenWithinTheCap, ()) {
  const int64_t E = *rc::gen::inRange(1, 17);
  const int64_t K = *rc::gen::inRange<int64_t>(1, E + 1);
  const int64_t N = *rc::gen::inRange(0, 5000);
  std::vector<double> shares;
  double total = 0;
  for (int64_t e = 0; e < E; ++e) {
    shares.push_back(*rc::gen::element(0.0, 0.5, 1.0, 2.0, 7.0));
    total += shares.back();
  }
  if (total == 0) shares[0] = total = 1;
  for (double& s : shares) s /= total;
  const auto c = loaded_tokens_per_expert(N, K, shares);
  RC_ASSERT(c.size() == static_cast<size_t>(E));
  int64_t sum = 0;
  bool capped = false;
  for (size_t e = 0; e < c.size(); ++e) {
    RC_ASSERT(c[e] >= 0 && c[e] <= N);
    sum += c[e];
    capped = capped || static_cast<double>(N * K) * shares[e] > static_cast<double>(N);
  }
  RC_ASSERT(sum == N * K);
  if (!capped)
    for (size_t e = 0; e < c.size(); ++e)
      RC_ASSERT(std::abs(static_cast<double>(c[e]) - static_cast<double>(N * K) * shares[e]) < 1.0);
}

RC_GTEST_PROP(ExpertParallelProp, RandomMoeWithEpSimulatesCleanly, ()) {
  const int ep = *rc::gen::element(2, 4);
  const int efsdp = *rc::gen::element(1, 2);
  const int replicate = *rc::gen::element(1, 2);
  fullshard::testing::TinyOptions o;
  o.model = "tiny-moe";
  o.mesh = replicate > 1 ? std::vector<int>{replicate, ep * efsdp} : std::vector<int>{ep * efsdp};
  o.steps = 3;
  o.batch = *rc::gen::inRange(1, 3);
  o.seq = *rc::gen::element(8, 16, 32);
  o.activation_checkpointing = *rc::gen::element<std::string>("none", "full");
  o.mixed_precision =
      *rc::gen::element(json::object(), json{{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}});
  json j = fullshard::testing::tiny_scenario_json(o);
  j["expert_parallel"] = {{"degree", ep}};
  const double hot = *rc::gen::element(1.0, 1.5, 3.0);
  if (hot > 1) j["training"]["moe_routing"] = {{"hot_expert_factor", hot}};
  sim::SimulateOptions so;
  so.all_ranks = true;
  const auto r = sim::simulate_scenario(parse_scenario(j), so);
  RC_ASSERT(r.ok());
  for (const auto& c : r.classes) {
    RC_ASSERT(c.allocated_after_step.size() == 3u);
    RC_ASSERT(c.allocated_after_step[1] == c.allocated_after_step[2]);
  }
}
