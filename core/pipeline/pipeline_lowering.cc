#include "core/pipeline/pipeline_lowering.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/common/error.h"

namespace fullshard {
namespace {

// What a rank has placed so far, as `_add_send_recv`'s prev_actions: (stage, what, microbatch),
// `what` a PipelineOp for compute and 10 + LoweredKind for the others.
using Key = std::tuple<int, int, int>;
Key key(const PipelineAction& a) { return {a.stage, static_cast<int>(a.op), a.microbatch}; }
Key key(LoweredKind k, int stage, int mb) { return {stage, 10 + static_cast<int>(k), mb}; }

LoweredAction comm(LoweredKind k, int stage, int mb) {
  LoweredAction a;
  a.kind = k;
  a.stage = stage;
  a.microbatch = mb;
  return a;
}

bool is_input_backward(PipelineOp op) {
  return op == PipelineOp::kFullBackward || op == PipelineOp::kBackwardInput;
}

// Rank by rank, each compute item: one action, or an OVERLAP_F_B pair.
std::vector<std::vector<LoweredAction>> compute_items(const PipelineOrder& order) {
  std::vector<std::vector<LoweredAction>> out(order.size());
  for (size_t r = 0; r < order.size(); ++r)
    for (size_t i = 0; i < order[r].size(); ++i) {
      LoweredAction a;
      a.compute.push_back(order[r][i]);
      if (order[r][i].overlaps_next && i + 1 < order[r].size()) a.compute.push_back(order[r][++i]);
      out[r].push_back(std::move(a));
    }
  return out;
}

// `_add_unshard_reshard`: before each compute item, the next `max_active` distinct stages it and
// the items after it run are unsharded, the others resharded; at the end, every stage resharded.
// PyTorch keeps the resident stages in a Python set; ascending order here gives its order on
// every shape of the oracle.
std::vector<LoweredAction> add_unshard_reshard(const std::vector<LoweredAction>& items,
                                               int max_active) {
  std::vector<LoweredAction> out;
  std::set<int> active;
  for (size_t i = 0; i < items.size(); ++i) {
    std::vector<int> next;  // next_stage_indices
    for (size_t j = i; j < items.size(); ++j) {
      const bool pair = items[j].compute.size() > 1;
      for (const PipelineAction& a : items[j].compute)
        if (std::find(next.begin(), next.end(), a.stage) == next.end()) {
          next.push_back(a.stage);
          if (!pair && static_cast<int>(next.size()) == max_active) break;
        }
      if (static_cast<int>(next.size()) >= max_active) break;
    }
    std::vector<int> evict;
    for (int s : active)
      if (std::find(next.begin(), next.end(), s) == next.end()) evict.push_back(s);
    for (int s : evict) {
      active.erase(s);
      out.push_back(comm(LoweredKind::kReshard, s, -1));
    }
    for (int s : next)
      if (active.insert(s).second) out.push_back(comm(LoweredKind::kUnshard, s, -1));
    out.push_back(items[i]);
  }
  for (int s : active) out.push_back(comm(LoweredKind::kReshard, s, -1));
  return out;
}

// `_add_reduce_grad`: REDUCE_GRAD right after the item that runs a stage's m-th B or W.
std::vector<LoweredAction> add_reduce_grad(const std::vector<LoweredAction>& actions, int m) {
  std::vector<LoweredAction> out;
  std::map<int, int> count;
  for (const LoweredAction& a : actions) {
    out.push_back(a);
    for (const PipelineAction& c : a.compute)
      if ((c.op == PipelineOp::kFullBackward || c.op == PipelineOp::kBackwardWeight) &&
          ++count[c.stage] == m)
        out.push_back(comm(LoweredKind::kReduceGrad, c.stage, -1));
  }
  return out;
}

}  // namespace

const char* lowered_kind_name(LoweredKind kind) {
  switch (kind) {
    case LoweredKind::kCompute: return "";
    case LoweredKind::kSendF: return "SEND_F";
    case LoweredKind::kRecvF: return "RECV_F";
    case LoweredKind::kSendB: return "SEND_B";
    case LoweredKind::kRecvB: return "RECV_B";
    case LoweredKind::kUnshard: return "UNSHARD";
    case LoweredKind::kReshard: return "RESHARD";
    case LoweredKind::kReduceGrad: return "REDUCE_GRAD";
  }
  return "?";
}

std::string format_lowered_actions(const std::vector<LoweredAction>& actions) {
  std::string out;
  for (const LoweredAction& a : actions) {
    if (!out.empty()) out += ' ';
    if (a.kind == LoweredKind::kCompute) {
      std::vector<PipelineAction> c = a.compute;
      if (c.size() > 1) c.front().overlaps_next = true;
      out += format_pipeline_actions(c);
    } else if (a.microbatch >= 0) {
      out += fmt::format("{}{}{}", a.stage, lowered_kind_name(a.kind), a.microbatch);
    } else {
      out += fmt::format("{}{}", a.stage, lowered_kind_name(a.kind));
    }
  }
  return out;
}

LoweredOrder lower_pipeline_order(const PipelineScheduleOptions& o, const PipelineOrder& order,
                                  int max_active_stages) {
  const int n = o.num_stages();
  auto rank = [&](int stage) { return pipeline_stage_rank(o, stage); };
  std::vector<std::deque<LoweredAction>> todo;
  for (const auto& items : compute_items(order)) {
    const auto l = add_reduce_grad(add_unshard_reshard(items, max_active_stages), o.microbatches);
    todo.emplace_back(l.begin(), l.end());
  }
  const size_t ranks = todo.size();
  LoweredOrder out(ranks);
  std::vector<std::set<Key>> placed(ranks);
  // NOTE [Lowered send and recv order] (pipeline_lowering.h): `_has_comms`, `_ready_to_schedule`.
  auto crosses = [&](const PipelineAction& a) {
    if (a.op == PipelineOp::kForward) return a.stage != n - 1 && rank(a.stage + 1) != rank(a.stage);
    return is_input_backward(a.op) && a.stage != 0 && rank(a.stage - 1) != rank(a.stage);
  };
  auto ready = [&](const PipelineAction& a, const std::set<Key>& p) {
    const int s = a.stage, mb = a.microbatch;
    if (a.op == PipelineOp::kForward && s != 0)
      return p.count(key(LoweredKind::kRecvF, s, mb)) ||
             p.count(key({s - 1, PipelineOp::kForward, mb}));
    if (is_input_backward(a.op) && s != n - 1)
      return p.count(key(LoweredKind::kRecvB, s, mb)) ||
             p.count(key({s + 1, PipelineOp::kBackwardInput, mb})) ||
             p.count(key({s + 1, PipelineOp::kFullBackward, mb}));
    return true;
  };
  for (bool left = true; left;) {
    bool progress = false;
    left = false;
    for (size_t r = 0; r < ranks; ++r) {
      if (todo[r].empty()) continue;
      const LoweredAction& a = todo[r].front();
      if (!std::all_of(a.compute.begin(), a.compute.end(),
                       [&](const PipelineAction& c) { return ready(c, placed[r]); })) {
        left = true;
        continue;
      }
      out[r].push_back(a);
      for (const PipelineAction& c : a.compute) {
        placed[r].insert(key(c));
        if (!crosses(c)) continue;
        const bool f = c.op == PipelineOp::kForward;
        const int to = f ? c.stage + 1 : c.stage - 1;
        const LoweredKind send = f ? LoweredKind::kSendF : LoweredKind::kSendB;
        const LoweredKind recv = f ? LoweredKind::kRecvF : LoweredKind::kRecvB;
        out[r].push_back(comm(send, c.stage, c.microbatch));
        placed[r].insert(key(send, c.stage, c.microbatch));
        const auto peer = static_cast<size_t>(rank(to));
        out[peer].push_back(comm(recv, to, c.microbatch));
        placed[peer].insert(key(recv, to, c.microbatch));
      }
      todo[r].pop_front();
      progress = true;
      left = left || !todo[r].empty();
    }
    for (size_t r = 0; r < ranks && !left; ++r) left = !todo[r].empty();
    FULLSHARD_CHECK(progress || !left, "the pipeline order cannot place its sends and recvs");
  }
  return out;
}

std::string check_lowered_order(const PipelineScheduleOptions& o, const LoweredOrder& lowered) {
  if (static_cast<int>(lowered.size()) != o.pp_size)
    return fmt::format("{} ranks lowered for pp {}", lowered.size(), o.pp_size);
  const int n = o.num_stages();
  auto rank = [&](int stage) { return pipeline_stage_rank(o, stage); };
  // A transfer's channel: (from stage, to stage); its peer rank.
  auto channel = [](const LoweredAction& a) -> std::pair<int, int> {
    switch (a.kind) {
      case LoweredKind::kSendF: return {a.stage, a.stage + 1};
      case LoweredKind::kRecvF: return {a.stage - 1, a.stage};
      case LoweredKind::kSendB: return {a.stage, a.stage - 1};
      case LoweredKind::kRecvB: return {a.stage + 1, a.stage};
      default: return {-1, -1};
    }
  };
  auto is_send = [](LoweredKind k) { return k == LoweredKind::kSendF || k == LoweredKind::kSendB; };
  auto is_recv = [](LoweredKind k) { return k == LoweredKind::kRecvF || k == LoweredKind::kRecvB; };
  // Statically: each compute after what it reads, each send after what it sends, and per
  // channel the same microbatches sent as received, in the same order.
  std::map<std::pair<int, int>, std::vector<int>> sent, received;
  for (int r = 0; r < o.pp_size; ++r) {
    std::set<Key> p;
    for (const LoweredAction& a : lowered[static_cast<size_t>(r)]) {
      const std::string what = fmt::format("rank {} action {}", r, format_lowered_actions({a}));
      for (const PipelineAction& c : a.compute) {
        const int s = c.stage, mb = c.microbatch;
        if (c.op == PipelineOp::kForward && s != 0 &&
            !(rank(s - 1) == r ? p.count(key({s - 1, PipelineOp::kForward, mb}))
                               : p.count(key(LoweredKind::kRecvF, s, mb))))
          return what + ": runs before its input arrives";
        if (is_input_backward(c.op) && s != n - 1 &&
            !(rank(s + 1) == r ? p.count(key({s + 1, PipelineOp::kBackwardInput, mb})) ||
                                     p.count(key({s + 1, PipelineOp::kFullBackward, mb}))
                               : p.count(key(LoweredKind::kRecvB, s, mb))))
          return what + ": runs before its output gradient arrives";
        p.insert(key(c));
      }
      if (a.kind == LoweredKind::kCompute) continue;
      if (is_send(a.kind) || is_recv(a.kind)) {
        const auto ch = channel(a);
        if (ch.second < 0 || ch.second >= n || ch.first < 0 || ch.first >= n ||
            rank(ch.first) == rank(ch.second) || rank(is_send(a.kind) ? ch.first : ch.second) != r)
          return what + ": no such transfer from this rank";
        if (is_send(a.kind)) {
          const PipelineOp made = a.kind == LoweredKind::kSendF ? PipelineOp::kForward
                                                                : PipelineOp::kBackwardInput;
          if (!p.count(key({a.stage, made, a.microbatch})) &&
              !p.count(key({a.stage, PipelineOp::kFullBackward, a.microbatch})))
            return what + ": sends before the action that makes it";
          sent[ch].push_back(a.microbatch);
        } else {
          received[ch].push_back(a.microbatch);
        }
      }
      p.insert(key(a.kind, a.stage, a.microbatch));
    }
  }
  if (sent != received) {
    for (const auto& [ch, mbs] : sent)
      if (received[ch] != mbs)
        return fmt::format("stage {} -> {}: the sends and recvs differ in number or order",
                           ch.first, ch.second);
    return "a recv without its send";
  }
  // Play: a rank runs on until a send or recv, which completes when the peer is at its match.
  std::vector<size_t> at(lowered.size(), 0);
  auto done = [&](size_t r) { return at[r] == lowered[r].size(); };
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < lowered.size(); ++r) {
      while (!done(r) && !is_send(lowered[r][at[r]].kind) && !is_recv(lowered[r][at[r]].kind)) {
        ++at[r];
        progress = true;
      }
      if (done(r) || !is_send(lowered[r][at[r]].kind)) continue;
      const LoweredAction& s = lowered[r][at[r]];
      const auto ch = channel(s);
      const auto peer = static_cast<size_t>(rank(ch.second));
      if (done(peer)) continue;
      const LoweredAction& v = lowered[peer][at[peer]];
      if (is_recv(v.kind) && channel(v) == ch && v.microbatch == s.microbatch) {
        ++at[r];
        ++at[peer];
        progress = true;
      }
    }
  }
  std::string blocked;
  for (size_t r = 0; r < lowered.size(); ++r)
    if (!done(r))
      blocked += fmt::format("{}rank {} at {}", blocked.empty() ? "" : ", ", r,
                             format_lowered_actions({lowered[r][at[r]]}));
  return blocked.empty() ? "" : "deadlock: " + blocked;
}

}  // namespace fullshard
