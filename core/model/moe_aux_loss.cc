#include "core/model/moe_aux_loss.h"

#include "core/common/error.h"
#include "core/model/model_config.h"
#include "core/model/op_util.h"
#include "core/runtime/copy_args.h"
#include "core/runtime/moe_args.h"

namespace fullshard {
namespace {

using ops::detail::el;
using ops::detail::kCompute;
using ops::detail::make_op;

// T^2: the loss and its gradient divide by the square of the forward's router rows.
double rows_squared(const MoeAuxLoss& aux) {
  const double t = static_cast<double>(aux.layers) * static_cast<double>(aux.tokens);
  return t * t;
}

}  // namespace

void add_moe_aux_loss_buffers(Module& root, const MoeConfig& m) {
  if (!m.enabled() || m.load_balance != MoeLoadBalance::kAuxLoss) return;
  const TensorMeta meta{DType::kFloat32, {m.num_experts}};
  root.add_buffer("moe_aux_counts", meta, false);
  root.add_buffer("moe_aux_probs", meta, false);
  root.add_buffer("moe_aux_counts_at_loss", meta, false);
}

MoeAuxLoss moe_aux_loss_state(Module& root, const ModelConfig& c) {
  MoeAuxLoss aux;
  if (!c.moe.enabled() || c.moe.load_balance != MoeLoadBalance::kAuxLoss) return aux;
  aux.counts = root.buffer("moe_aux_counts").tensor;
  aux.probs = root.buffer("moe_aux_probs").tensor;
  aux.counts_at_loss = root.buffer("moe_aux_counts_at_loss").tensor;
  FULLSHARD_CHECK(aux.counts && aux.probs && aux.counts_at_loss,
                  "the aux-loss buffers were never allocated (allocate_buffers)");
  aux.layers = c.moe.moe_layer_count(c.n_layers);
  aux.coeff = c.moe.load_balance_coeff;
  return aux;
}

void moe_aux_loss_begin(ExecContext& c, MoeAuxLoss& aux) {
  if (!aux.enabled()) return;
  aux.tokens = 0;
  for (const Tensor& t : {aux.counts, aux.probs}) {
    OpCall fill = make_op(OpKind::kFill, "moe aux loss zeros", {}, {t.ref()}, 0);
    fill.bytes = static_cast<double>(t.nbytes());
    FillArgs{0.0}.encode(fill);
    c.launch(fill);
  }
}

void moe_aux_loss_counts(ExecContext& c, const MoeAuxLoss& aux, const Tensor& counts,
                         const std::string& name) {
  OpCall add = make_op(OpKind::kAdd, name, {aux.counts.ref(), counts.ref()}, {aux.counts.ref()},
                       static_cast<double>(aux.counts.numel()));
  add.bytes = 3.0 * static_cast<double>(aux.counts.nbytes());
  c.launch(add);
}

Value moe_aux_loss_scores(ExecContext& c, MoeAuxLoss& aux, Value scores, const std::string& name) {
  Backend& b = c.backend();
  const int64_t E = aux.counts.numel(), N = scores.t.numel() / E;
  aux.tokens = N;  // every MoE layer of a forward routes the same N rows
  OpCall sum = make_op(OpKind::kAddSumRows, name + ".sum",
                       {scores.t.ref(), aux.probs.ref()}, {aux.probs.ref()}, el(scores.t));
  AuxLossArgs{N, E, 0.0}.encode(sum);
  c.launch(sum);
  Value out = ops::detail::result(c, scores.t, scores.requires_grad());
  if (c.recording() && scores.requires_grad()) {
    const double value = aux.grad_seed * aux.coeff * static_cast<double>(E) / rows_squared(aux);
    const Tensor total = aux.counts_at_loss;  // every layer's routing, copied at the loss
    c.record(Node{name, {scores.id}, {out.id}, [&b, total, value, N, E, name](std::vector<Tensor>& g) {
                    Tensor gx = ops::detail::grad_like(b, g[0], name + " grad_input");
                    OpCall op = make_op(OpKind::kMoeAuxLossBackward, name + " backward",
                                        {g[0].ref(), total.ref()}, {gx.ref()},
                                        static_cast<double>(N * E));
                    AuxLossArgs{N, E, value}.encode(op);
                    b.launch(kCompute, op);
                    return std::vector<Tensor>{gx};
                  }});
  }
  return out;
}

void moe_aux_loss_end(ExecContext& c, const MoeAuxLoss& aux, const Tensor& loss) {
  if (!aux.enabled() || aux.tokens == 0) return;
  const int64_t E = aux.counts.numel();
  OpCall op = make_op(OpKind::kMoeAuxLoss, "moe aux loss",
                      {aux.counts.ref(), aux.probs.ref(), loss.ref()}, {loss.ref()},
                      2.0 * static_cast<double>(E));
  AuxLossArgs{aux.tokens, E, aux.coeff * static_cast<double>(E) / rows_squared(aux)}.encode(op);
  c.launch(op);
  OpCall copy = make_op(OpKind::kCopy, "moe aux counts at the loss", {aux.counts.ref()},
                        {aux.counts_at_loss.ref()}, 0);
  c.launch(copy);
}

}  // namespace fullshard
