#include "core/model/moe_layer.h"

#include <fmt/format.h>

#include "core/common/error.h"
#include "core/model/expert_bias.h"
#include "core/model/moe_ops.h"
#include "core/model/moe_routing.h"
#include "core/model/ops.h"

namespace fullshard {

Module* add_moe_module(Module& block, const ModelConfig& c, const ExpertParallel& ep) {
  const MoeConfig& m = c.moe;
  const int64_t D = c.dim, E = m.num_experts, Fe = m.expert_dim;
  FULLSHARD_CHECK(E % ep.degree == 0, "expert parallelism must split the experts evenly");
  const int64_t El = E / ep.degree;
  Module* moe = block.add_child("moe", "MoE");
  moe->add_child("router", "TokenChoiceTopKRouter")
      ->add_child("gate", "Linear")
      ->add_param("weight", {E, D});
  Module* experts = moe->add_child("experts", "GroupedExperts");
  for (auto [name, shape] : {std::pair<const char*, Shape>{"w1", {El, Fe, D}},
                             {"w2", {El, D, Fe}},
                             {"w3", {El, Fe, D}}}) {
    Param& p = experts->add_param(name, shape);
    p.ep_degree = ep.degree;
    p.ep_index = ep.index;
  }
  if (m.shared_expert_dim > 0) {
    const int64_t Fs = m.shared_expert_dim;
    Module* s = moe->add_child("shared_experts", "FeedForward");
    s->add_child("w1", "Linear")->add_param("weight", {Fs, D});
    s->add_child("w2", "Linear")->add_param("weight", {D, Fs});
    s->add_child("w3", "Linear")->add_param("weight", {Fs, D});
  }
  add_expert_bias_buffers(*moe, m);  // NOTE [Expert bias] in expert_bias.h
  return moe;
}

namespace {

// FeedForward.forward: w2(silu(w1(x)) * w3(x)).
Value feed_forward(ExecContext& c, Module& ff, Value x) {
  const std::string& n = ff.fqn;
  Value g1 = ops::linear(c, x, ff.child("w1").param("weight"), nullptr, n + ".w1");
  Value s1 = ops::silu(c, std::move(g1), n + ".silu");
  Value g3 = ops::linear(c, std::move(x), ff.child("w3").param("weight"), nullptr, n + ".w3");
  Value p = ops::mul(c, std::move(s1), std::move(g3), n + ".mul");
  return ops::linear(c, std::move(p), ff.child("w2").param("weight"), nullptr, n + ".w2");
}

// A replayed call must be one of this model's: E counts per rank, this rank's summing to its
// routed tokens (N top_k); otherwise the record is of another scenario.
// With a capacity factor the counts are what the experts kept: this rank's at most `capacity`
// each (a peer's capacity follows its own batch), summing to at most N top_k (NOTE [Capacity
// factor] in moe_routing.h).
void check_recorded_call(const std::vector<std::vector<int64_t>>& h, int self, int64_t experts,
                         int64_t routed, int64_t capacity, bool drops, const std::string& layer) {
  for (const auto& counts : h) {
    int64_t sum = 0;
    bool over = false;
    for (int64_t t : counts) {
      sum += t;
      over = over || t > capacity;
    }
    const bool mine = &counts == &h[static_cast<size_t>(self)];
    if (static_cast<int64_t>(counts.size()) != experts ||
        (mine && (over || (drops ? sum > routed : sum != routed))))
      throw InputError("training.moe_routing.recorded",
                       fmt::format("routes {} tokens over {} experts at {}, where this scenario "
                                   "routes {} over {}",
                                   sum, counts.size(), layer, routed, experts),
                       "replay a recording of this scenario's model, batch and sequence length");
  }
}

}  // namespace

// NOTE [MoE op sequence]: MoE.forward of torchtitan (moe.py, utils.py, kernels.py at
// pytorch/torchtitan@08dc75a) in eager mode with use_grouped_mm and ep = 1, one op per aten
// call that allocates, each local alive as long as its Python variable:
//   router: gate linear [N, E] -> .to(float32) -> softmax | sigmoid (saves its output) ->
//     topk (saves the indices) -> route_norm (s / (sum + 1e-20)) -> * route_scale -> histc
//     (accumulated into the tokens_per_expert buffer, modelled with the expert bias only);
//     with the expert bias or groups (NOTE [Expert bias] in expert_bias.h) the top-k is chosen
//     from the biased, group-masked scores and the gate gathers the unbiased ones
//   reorderer: histc -> argsort(stable) -> top_scores.view(-1)[order] (alive to the end)
//   routed_input = x[order // K] (alive to the end)
//   experts (indices_padding_wrapper): vstack with a zero row -> generate_permute_indices
//     (each group padded to align, empty experts to align) -> x[perm] [P, D] -> grouped_mm w1,
//     silu, grouped_mm w3, mul, grouped_mm w2 -> new_empty [N K + 1, D], [perm] = out -> [:-1]
//   shared_experts(x) (module call), then zeros [N K, D] with [order] = routed_output,
//   .float() [N, K, D], bmm with the scores (saves both) -> .to(x.dtype) -> + shared.
// Not modelled yet: score_before_experts, qwen2_moe's shared gate (check_moe refuses them), and
// int32 index dtypes (int64 here; docs/moe.md).
// NOTE [Expert-parallel dispatch]: with ep > 1 torchtitan's ExpertParallel wraps the experts'
// forward (distribute_module's input_fn / output_fn; expert_parallel.py at
// pytorch/torchtitan@36a4b69). FSDP2's pre-forward hook is prepended, so inside the experts'
// call: unshard, then _token_dispatch (the split sizes exchanged and read back, NOTE [Split sizes
// exchanged first] in moe_dispatch.h; all-to-all-v of routed_input; _permute of the received
// rows over the E / ep local experts, num_tokens_per_expert_group freed after it), the grouped
// GEMMs, then _token_combine (_unpermute, all-to-all-v back to [N K, D]), then FSDP's
// post-forward. `self.permuted_indices` is an attribute of the layer's ExpertParallel: it stays
// alive until the layer's next forward replaces it (kept_indices). Split sizes come from the
// routing assumption in the simulator (NOTE [Expert-parallel routing] in moe_routing.h) and
// from the router on a real backend; with max receive buffers (NOTE [Receive buffers]) the
// dispatch output and all after it are sized for the most a rank can receive.
Value moe_forward(ExecContext& c, Module& moe, Value x, const ModelConfig& cfg,
                  const ExpertParallel& ep, Tensor* kept_indices, MoeAuxLoss* aux) {
  const MoeConfig& m = cfg.moe;
  FULLSHARD_CHECK(!m.score_before_experts && !m.shared_expert_gate,
                  moe.fqn + ": MoE variant not built (check_moe refuses it)");
  FULLSHARD_CHECK((m.load_balance == MoeLoadBalance::kAuxLoss) == (aux && aux->enabled()),
                  moe.fqn + ": the aux-loss state does not match model.moe.load_balance");
  const std::string& n = moe.fqn;
  const int64_t D = cfg.dim, E = m.num_experts, K = m.top_k;
  const Shape in_shape = x.t.shape();
  const int64_t N = x.t.numel() / D;
  const Value xf{x.t.view({x.t.dtype(), {N, D}}), x.id};  // x.view(-1, dim)

  // ---- router
  Module& gate = moe.child("router").child("gate");
  Value logits = ops::linear(c, xf, gate.param("weight"), nullptr, gate.fqn);
  Value s32 = ops::to_dtype(c, std::move(logits), DType::kFloat32, n + ".router.float");
  Value scores = m.score_func == MoeScoreFunc::kSoftmax
                     ? ops::moe::softmax(c, std::move(s32), n + ".router.softmax")
                     : ops::moe::sigmoid(c, std::move(s32), n + ".router.sigmoid");
  if (aux) scores = moe_aux_loss_scores(c, *aux, std::move(scores), n + ".router.aux_probs");
  const bool bias = m.load_balance == MoeLoadBalance::kExpertBias;
  Value top_scores;
  Tensor selected, choice, discarded;  // the last two: router locals (NOTE [Expert bias])
  if (bias || m.num_expert_groups > 1) {
    FULLSHARD_CHECK(!bias || moe.buffer("expert_bias").tensor,
                    n + ": the expert bias buffer was never allocated (allocate_buffers)");
    const Tensor expert_bias = bias ? moe.buffer("expert_bias").tensor : Tensor();
    choice = ops::moe::router_choice(c, scores.t, expert_bias, m.num_expert_groups,
                                     m.num_limited_groups, n + ".router.choice");
    auto [values, indices] = ops::moe::topk(c, Value{choice, 0}, K, n + ".router.topk");
    discarded = values.t;
    selected = indices;
    top_scores = ops::moe::gather_scores(c, std::move(scores), selected, n + ".router.gather");
  } else {
    auto [values, indices] = ops::moe::topk(c, std::move(scores), K, n + ".router.topk");
    top_scores = std::move(values);
    selected = indices;
  }
  if (m.route_norm) top_scores = ops::moe::route_norm(c, std::move(top_scores), n + ".router.norm");
  top_scores = ops::moe::scale(c, std::move(top_scores), m.route_scale, n + ".router.scale");
  Tensor router_counts = ops::moe::histogram(c, selected, E, n + ".router.histc");
  choice = discarded = Tensor();  // the router returns
  if (bias) {  // with torch.no_grad(): self.tokens_per_expert.add_(num_tokens_per_expert)
    const Tensor acc = moe.buffer("tokens_per_expert").tensor;
    OpCall add;
    add.kind = OpKind::kAdd;
    add.name = n + ".tokens_per_expert.add_";
    add.inputs = {acc.ref(), router_counts.ref()};
    add.outputs = {acc.ref()};
    add.flops = static_cast<double>(E);
    add.bytes = 3.0 * static_cast<double>(acc.nbytes());
    c.launch(add);
  } else if (aux) {  // NOTE [Auxiliary load-balancing loss] in moe_aux_loss.h
    moe_aux_loss_counts(c, *aux, router_counts, n + ".router.aux_counts.add_");
  } else {
    router_counts = Tensor();  // freed at once (the buffer is not modelled without the bias)
  }
  // Token dropping (NOTE [Capacity factor] in moe_routing.h): a dropped slot points at expert E.
  const int64_t capacity = expert_capacity(m, N);
  const Tensor routed_to =
      m.drops_tokens() ? ops::moe::drop_over_capacity(c, top_scores.t, selected, E, capacity,
                                                      m.drop_policy, n + ".router.capacity")
                       : selected;

  // ---- reorderer
  const Tensor counts = ops::moe::histogram(c, routed_to, E, n + ".reorderer.histc");
  router_counts = Tensor();  // num_tokens_per_expert reassigned by the reorderer
  // A real run keeps what the router chose; the simulator replays it (NOTE [Recorded routing]
  // in core/model/moe_routing_record.h).
  std::vector<int64_t> tokens_per_expert = assumed_tokens_per_expert(m, N, ep.degree);
  EpRouting epr;
  if (ep.routing && ep.routing->replaying()) {
    const std::vector<std::vector<int64_t>> h =
        ep.routing->next(ep.enabled() ? ep.group.ranks : std::vector<int>{c.backend().rank()});
    check_recorded_call(h, ep.enabled() ? ep.index : 0, E, N * K, capacity, m.drops_tokens(), n);
    tokens_per_expert = h[static_cast<size_t>(ep.enabled() ? ep.index : 0)];
    epr = ep_routing(ep.enabled() ? h : std::vector<std::vector<int64_t>>{tokens_per_expert},
                     ep.enabled() ? ep.index : 0);
  } else {
    if (ep.routing && c.backend().has_data()) {  // the grouped GEMMs' FLOPs count what ran
      tokens_per_expert = ops::moe::read_counts(c.backend(), counts, n + ".reorderer.histc");
      ep.routing->record(tokens_per_expert);
    }
    epr = ep_routing(tokens_per_expert, ep.degree, ep.index);
  }
  const Tensor order = ops::moe::argsort(c, routed_to, n + ".reorderer.argsort");
  const Tensor flat_scores = top_scores.t.view({top_scores.t.dtype(), {N * K, 1}});
  const Tensor sorted_scores =  // top_scores_experts_sorted: unused when scoring after
      ops::moe::gather_rows(c, Value{flat_scores, 0}, order, n + ".reorderer.scores").t;
  const Tensor token_of = ops::moe::floor_divide(c, order, K, n + ".token_indices");
  const Value routed_input = ops::moe::gather_rows(c, xf, token_of, n + ".routed_input");

  // ---- experts (indices_padding_wrapper around _run_experts_grouped_mm)
  Module& ex = moe.child("experts");
  const int64_t align = m.token_group_align;
  const int64_t routed = N * K;
  int64_t computed =
      grouped_rows(ep.enabled() ? epr.local_tokens_per_expert : tokens_per_expert, align);
  const Value routed_output = c.call_module(ex, routed_input, [&](ExecContext& ec, Value v) {
    int64_t rows = routed, groups = E;
    Tensor group_counts;
    std::vector<int64_t> send_rows, recv_rows;
    if (ep.enabled()) {  // _token_dispatch
      ops::moe::SplitSizes sp = ops::moe::exchange_split_sizes(
          ec, counts, ep, epr.send_rows, epr.recv_rows, ex.fqn + ".dispatch");
      group_counts = std::move(sp.group_counts);
      send_rows = std::move(sp.send_rows);
      recv_rows = std::move(sp.recv_rows);
      if (ep.routing && !ep.routing->replaying() && ec.backend().has_data()) {
        // What each peer routed to this rank's experts (num_tokens_per_expert_group), summed.
        const std::vector<int64_t> g =
            ops::moe::read_counts(ec.backend(), group_counts, ex.fqn + ".dispatch");
        std::vector<int64_t> local(static_cast<size_t>(E / ep.degree), 0);
        for (size_t i = 0; i < g.size(); ++i) local[i % local.size()] += g[i];
        computed = grouped_rows(local, align);
      }
      int64_t received = 0, kept = 0;
      for (int64_t r : recv_rows) received += r;
      for (int64_t r : send_rows) kept += r;
      // The kept slots lead routed_input (a dropped one sorts last): routed_input[:kept] is sent.
      if (m.drops_tokens()) v = ops::moe::slice_rows(ec, std::move(v), kept, ex.fqn + ".kept");
      rows = ep.max_receive ? max_receive_rows(N, K, E, ep.degree, capacity) : received;
      v = ops::moe::all_to_all(ec, std::move(v), send_rows, recv_rows, rows, ep.group,
                               ex.fqn + ".dispatch");
      groups = E / ep.degree;
    }
    Value padded = ops::moe::pad_row(ec, std::move(v), ex.fqn + ".vstack");
    auto perm = ops::moe::permute_indices(ec, ep.enabled() ? group_counts : counts, rows, groups,
                                          align, ex.fqn + ".permute");
    group_counts = Tensor();
    if (ep.enabled() && kept_indices) *kept_indices = perm.indices;  // self.permuted_indices
    Value xe = ops::moe::gather_rows(ec, std::move(padded), perm.indices, ex.fqn + ".permuted");
    Value h1 = ops::moe::grouped_mm(ec, xe, ex.param("w1"), perm.offsets, computed, ex.fqn + ".w1");
    Value a = ops::silu(ec, std::move(h1), ex.fqn + ".silu");
    Value h3 = ops::moe::grouped_mm(ec, std::move(xe), ex.param("w3"), perm.offsets, computed,
                                    ex.fqn + ".w3");
    Value h = ops::mul(ec, std::move(a), std::move(h3), ex.fqn + ".mul");
    Value out = ops::moe::grouped_mm(ec, std::move(h), ex.param("w2"), perm.offsets, computed,
                                     ex.fqn + ".w2");
    Value unpermuted =
        ops::moe::scatter_rows(ec, std::move(out), perm.indices, rows + 1, ex.fqn + ".unpermute");
    Value sliced = ops::moe::slice_rows(ec, std::move(unpermuted), rows, ex.fqn + ".slice");
    if (!ep.enabled()) return sliced;
    perm = {};
    int64_t sent = 0;  // routed, or the kept rows when dropping
    for (int64_t r : send_rows) sent += r;
    return ops::moe::all_to_all(ec, std::move(sliced), recv_rows, send_rows, sent, ep.group,
                                ex.fqn + ".combine");  // _token_combine
  });

  // ---- shared expert, unsort, combine
  Value shared;
  if (m.shared_expert_dim > 0) {
    Module& se = moe.child("shared_experts");
    shared = c.call_module(
        se, xf, [&se](ExecContext& sc, Value v) { return feed_forward(sc, se, std::move(v)); });
  }
  // With ep > 1 and dropping, routed_output holds the kept rows only: out[order[:kept]] = them,
  // the dropped slots' rows stay zero (NOTE [Capacity factor]).
  const int64_t out_rows = routed_output.t.numel() / D;
  const Tensor unsort_index =
      out_rows == routed ? order : order.view({DType::kInt64, {out_rows}});
  Value unsorted = ops::moe::scatter_rows(c, routed_output, unsort_index, routed, n + ".unsort");
  unsorted.t = unsorted.t.view({unsorted.t.dtype(), {N, K, D}});  // alive to the end
  Value uf = ops::to_dtype(c, unsorted, DType::kFloat32, n + ".unsorted.float");
  Value combined = ops::moe::weighted_sum(c, top_scores, std::move(uf), n + ".combine");
  Value out = ops::to_dtype(c, std::move(combined), x.t.dtype(), n + ".combine.to");
  if (shared.t) out = ops::add(c, std::move(shared), std::move(out), n + ".add_shared");
  out.t = out.t.view({out.t.dtype(), in_shape});
  return out;
}

}  // namespace fullshard
