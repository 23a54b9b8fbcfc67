#include "core/model/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/common/error.h"

namespace fullshard {

std::vector<int64_t> balanced_tokens_per_expert(int64_t routed_tokens, int64_t experts) {
  FULLSHARD_CHECK(experts >= 1 && routed_tokens >= 0, "balanced routing needs experts >= 1");
  std::vector<int64_t> c(static_cast<size_t>(experts), routed_tokens / experts);
  for (int64_t e = 0; e < routed_tokens % experts; ++e) ++c[static_cast<size_t>(e)];
  return c;
}

std::vector<int64_t> skewed_tokens_per_expert(int64_t tokens, int64_t top_k, int64_t experts,
                                              double hot_factor) {
  const int64_t routed = tokens * top_k;
  if (!(hot_factor > 1.0) || experts == 1) return balanced_tokens_per_expert(routed, experts);
  if (hot_factor >= static_cast<double>(experts)) {  // NOTE [Worst-case routing]
    std::vector<int64_t> c(static_cast<size_t>(experts), 0);
    for (int64_t e = 0; e < top_k; ++e) c[static_cast<size_t>(e)] = tokens;
    return c;
  }
  const double share = static_cast<double>(routed) / static_cast<double>(experts);
  const int64_t hot = std::min(tokens, static_cast<int64_t>(std::floor(hot_factor * share)));
  std::vector<int64_t> c = {hot};
  for (int64_t t : balanced_tokens_per_expert(routed - hot, experts - 1)) c.push_back(t);
  return c;
}

std::vector<int64_t> loaded_tokens_per_expert(int64_t tokens, int64_t top_k,
                                              const std::vector<double>& shares) {
  const size_t E = shares.size();
  FULLSHARD_CHECK(E >= 1 && tokens >= 0 && top_k >= 1 && top_k <= static_cast<int64_t>(E),
                  "expert load: needs 1 <= top_k <= experts");
  std::vector<int64_t> c(E, 0);
  std::vector<bool> capped(E, false);
  int64_t left = tokens * top_k;
  // Each round gives `left` to the uncapped experts by share (largest remainder); an expert
  // over `tokens` is capped and its excess goes round again. At most E rounds.
  for (size_t round = 0; round < E && left > 0; ++round) {
    double total = 0;
    for (size_t e = 0; e < E; ++e)
      if (!capped[e]) total += std::max(shares[e], 0.0);
    std::vector<size_t> open;
    for (size_t e = 0; e < E; ++e)
      if (!capped[e]) open.push_back(e);
    if (open.empty()) break;
    std::vector<int64_t> add(E, 0);
    std::vector<std::pair<double, size_t>> rem;
    int64_t given = 0;
    for (size_t e : open) {
      const double want = total > 0 ? static_cast<double>(left) * std::max(shares[e], 0.0) / total
                                    : static_cast<double>(left) / static_cast<double>(open.size());
      add[e] = static_cast<int64_t>(std::floor(want));
      given += add[e];
      rem.emplace_back(want - static_cast<double>(add[e]), e);
    }
    std::stable_sort(rem.begin(), rem.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t i = 0; given < left; ++i, ++given) ++add[rem[i % rem.size()].second];
    left = 0;
    for (size_t e : open) {
      c[e] += add[e];
      if (c[e] >= tokens) {
        left += c[e] - tokens;
        c[e] = tokens;
        capped[e] = true;
      }
    }
  }
  return c;
}

int64_t expert_capacity(const MoeConfig& m, int64_t tokens) {
  if (!m.drops_tokens()) return tokens;
  FULLSHARD_CHECK(m.num_experts >= 1 && tokens >= 0, "expert_capacity: needs experts >= 1");
  // Megatron's math.ceil((num_tokens / num_experts) * capacity_factor), num_tokens = N K.
  const double c = std::ceil(static_cast<double>(tokens * m.top_k) /
                             static_cast<double>(m.num_experts) * m.capacity_factor);
  return std::min(tokens, static_cast<int64_t>(c));
}

std::vector<int64_t> capped_tokens_per_expert(std::vector<int64_t> counts, int64_t capacity) {
  for (int64_t& t : counts) t = std::min(t, capacity);
  return counts;
}

std::vector<int64_t> assumed_tokens_per_expert(const MoeConfig& m, int64_t tokens, int ep) {
  std::vector<int64_t> c;
  const bool worst = m.expert_load.empty() && m.num_experts > 1 &&
                     m.hot_expert_factor >= static_cast<double>(m.num_experts);
  if (!m.expert_load.empty()) {
    c = loaded_tokens_per_expert(tokens, m.top_k, m.expert_load);
  } else if (worst && m.drops_tokens()) {  // NOTE [Capacity factor]: fill ep rank 0's experts
    const int64_t local = std::max<int64_t>(1, m.num_experts / std::max(ep, 1));
    const int64_t on_local = tokens * std::min(m.top_k, local);
    c = balanced_tokens_per_expert(on_local, local);
    if (m.top_k > local) {
      for (int64_t t : balanced_tokens_per_expert(tokens * (m.top_k - local), m.num_experts - local))
        c.push_back(t);
    }
    c.resize(static_cast<size_t>(m.num_experts), 0);
  } else {
    c = skewed_tokens_per_expert(tokens, m.top_k, m.num_experts, m.hot_expert_factor);
  }
  return m.drops_tokens() ? capped_tokens_per_expert(std::move(c), expert_capacity(m, tokens)) : c;
}

int64_t grouped_rows(const std::vector<int64_t>& tokens_per_expert, int64_t align) {
  int64_t rows = 0;
  for (int64_t t : tokens_per_expert) rows += (std::max(t, align) + align - 1) / align * align;
  return rows;
}

EpRouting ep_routing(const std::vector<int64_t>& tokens_per_expert, int ep, int ep_index) {
  FULLSHARD_CHECK(ep >= 1, "ep_routing: ep must be positive");
  return ep_routing(std::vector<std::vector<int64_t>>(static_cast<size_t>(ep), tokens_per_expert),
                    ep_index);
}

EpRouting ep_routing(const std::vector<std::vector<int64_t>>& peers, int ep_index) {
  const int ep = static_cast<int>(peers.size());
  const int64_t E = ep >= 1 ? static_cast<int64_t>(peers[0].size()) : 0;
  FULLSHARD_CHECK(ep >= 1 && E % ep == 0 && ep_index >= 0 && ep_index < ep,
                  "ep_routing: ep must divide the experts");
  const int64_t local = E / ep;
  auto sent_to = [&](const std::vector<int64_t>& h, int j) {
    FULLSHARD_CHECK(static_cast<int64_t>(h.size()) == E, "ep_routing: histograms differ in size");
    int64_t n = 0;
    for (int64_t e = j * local; e < (j + 1) * local; ++e) n += h[static_cast<size_t>(e)];
    return n;
  };
  EpRouting r;
  r.local_tokens_per_expert.assign(static_cast<size_t>(local), 0);
  for (int j = 0; j < ep; ++j) {
    r.send_rows.push_back(sent_to(peers[static_cast<size_t>(ep_index)], j));
    r.recv_rows.push_back(sent_to(peers[static_cast<size_t>(j)], ep_index));
    for (int64_t e = 0; e < local; ++e)
      r.local_tokens_per_expert[static_cast<size_t>(e)] +=
          peers[static_cast<size_t>(j)][static_cast<size_t>(ep_index * local + e)];
  }
  return r;
}

int64_t permuted_rows(int64_t routed_tokens, int64_t experts, int64_t align) {
  return (routed_tokens + experts * align + align - 1) / align * align;
}

}  // namespace fullshard
