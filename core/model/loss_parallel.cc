// The vocab-parallel cross-entropy of torch.distributed.tensor.parallel.loss_parallel.
#include "core/model/op_util.h"
#include "core/model/ops.h"
#include "core/model/tensor_parallel.h"
#include "core/runtime/eager_args.h"
#include "core/runtime/tensor_parallel_args.h"

namespace fullshard::ops::tp {
using detail::el;
using detail::kCompute;
using detail::make_op;
using detail::result;

// NOTE [Loss parallel]: with loss parallel the output projection keeps its vocab-sharded
// logits (ColwiseParallel output_layouts=Shard(-1)), and F.cross_entropy under the
// loss_parallel() context dispatches to DTensor's handlers in torch/distributed/tensor/
// parallel/loss.py. _log_softmax runs on the local [N, V/tp] columns: amax, an all-reduce MAX
// of the row maxima, x - max, exp, sum, an all-reduce SUM, log, and shifted - logsumexp (funcol
// all_reduce clones its input first). Autograd sees one _log_softmax node saving its fp32
// output. _nll_loss_forward picks each row's target where this rank holds it (0 elsewhere),
// all-reduces the picks and takes the mean. Its backward computes the whole gradient of the
// pair, (exp(log_softmax) - one_hot(target)) * grad / N, on the local columns; the
// _log_softmax backward handler passes the gradient through. No tp collective runs in
// backward; the logits are never gathered, which is where loss parallel saves memory.

Value vocab_parallel_cross_entropy(ExecContext& c, Value logits, const Tensor& labels,
                                   const TensorParallel& tp, const std::string& name) {
  Backend& b = c.backend();
  const int64_t Vl = logits.t.shape().back();
  const int64_t rows = logits.t.numel() / Vl;
  const int64_t start = static_cast<int64_t>(tp.index) * Vl;
  // .float(): the local cast (ToCopyBackward casts the gradient back).
  Value x = to_dtype(c, std::move(logits), DType::kFloat32, name + " float");
  const TensorMeta row_meta{DType::kFloat32, {rows}}, full_meta{DType::kFloat32, {rows, Vl}};
  Tensor lp = c.empty(full_meta, MemCategory::kActivation, name + " log_softmax");
  {
    Tensor mx = c.empty(row_meta, MemCategory::kTemporary, name + " amax");
    c.launch(make_op(OpKind::kRowMax, name + " amax", {x.t.ref()}, {mx.ref()}, el(x.t),
                     RowArgs{.dim = Vl}));
    Tensor gmx = all_reduce_clone(b, mx, ReduceOp::kMax, tp.group, MemCategory::kTemporary,
                                  name + " all_reduce(max)");
    mx = Tensor();
    Tensor shifted = c.empty(full_meta, MemCategory::kTemporary, name + " shifted");
    c.launch(make_op(OpKind::kSubRow, name + " sub", {x.t.ref(), gmx.ref()}, {shifted.ref()},
                     el(shifted), RowArgs{.dim = Vl}));
    gmx = Tensor();
    Tensor ex = c.empty(full_meta, MemCategory::kTemporary, name + " exp");
    c.launch(make_op(OpKind::kExp, name + " exp", {shifted.ref()}, {ex.ref()}, el(ex)));
    Tensor se = c.empty(row_meta, MemCategory::kTemporary, name + " sumexp");
    OpCall sum = make_op(OpKind::kSumLastDim, name + " sum", {ex.ref()}, {se.ref()}, el(ex),
                         RowArgs{.dim = Vl, .scale = 1.0, .has_scale = true});
    c.launch(sum);
    ex = Tensor();
    Tensor gse = all_reduce_clone(b, se, ReduceOp::kSum, tp.group, MemCategory::kTemporary,
                                  name + " all_reduce(sumexp)");
    se = Tensor();
    Tensor lse = c.empty(row_meta, MemCategory::kTemporary, name + " logsumexp");
    c.launch(make_op(OpKind::kLog, name + " log", {gse.ref()}, {lse.ref()}, el(lse)));
    gse = Tensor();
    c.launch(make_op(OpKind::kSubRow, name + " log_softmax", {shifted.ref(), lse.ref()}, {lp.ref()},
                     el(lp), RowArgs{.dim = Vl}));
  }
  Value lpv = result(c, lp, x.requires_grad());
  if (c.recording() && x.requires_grad())
    c.record(Node{name + " log_softmax", {x.id}, {lpv.id}, [](std::vector<Tensor>& g) {
                    return std::vector<Tensor>{g[0]};
                  }});
  x = Value{};
  Tensor picked = c.empty(row_meta, MemCategory::kTemporary, name + " nll picks");
  c.launch(make_op(OpKind::kNllVocabParallel, name + " nll_loss", {lp.ref(), labels.ref()},
                   {picked.ref()}, static_cast<double>(rows),
                   VocabParallelArgs{.dim = Vl, .start = start}));
  Tensor all = all_reduce_clone(b, picked, ReduceOp::kSum, tp.group, MemCategory::kTemporary,
                                name + " all_reduce(nll)");
  picked = Tensor();
  Tensor loss = c.empty({DType::kFloat32, {}}, MemCategory::kActivation, name + " loss");
  OpCall mean = make_op(
      OpKind::kSumLastDim, name + " mean", {all.ref()}, {loss.ref()}, static_cast<double>(rows),
      RowArgs{.dim = rows, .scale = 1.0 / static_cast<double>(rows), .has_scale = true});
  c.launch(mean);
  all = Tensor();
  Value out = result(c, loss, lpv.requires_grad());
  if (c.recording() && lpv.requires_grad()) {
    c.record(Node{name + " nll_loss",
                  {lpv.id},
                  {out.id},
                  [&b, lp, labels, rows, Vl, start, name](std::vector<Tensor>& g) {
                    Tensor gl = empty_tensor(b, lp.meta(), MemCategory::kTemporary, kCompute,
                                              name + " nll_loss grad_input");
                    OpCall op = make_op(
                        OpKind::kNllVocabParallelBackward, name + " nll_loss backward",
                        {g[0].ref(), lp.ref(), labels.ref()}, {gl.ref()}, 3 * el(gl),
                        VocabParallelArgs{
                            .dim = Vl, .start = start, .scale = 1.0 / static_cast<double>(rows)});
                    b.launch(kCompute, op);
                    return std::vector<Tensor>{gl};
                  }});
  }
  return out;
}

}  // namespace fullshard::ops::tp
