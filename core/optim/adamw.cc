#include "core/optim/adamw.h"

#include "core/optim/foreach_norm.h"

#include "core/model/ops.h"
#include "core/runtime/adamw_args.h"
#include "core/runtime/layer_args.h"

namespace fullshard {

namespace {
constexpr StreamRole kCurrent = StreamRole::kDefault;

// Optimizer and clipping run where the sharded parameters live: on the device, or on the
// host with CPU offload (then their "kernels" are CPU work the host waits for).
Tensor like(Backend& b, const Tensor& p, MemCategory cat, const std::string& what) {
  if (p.on_host()) {
    Buffer hb = b.allocate_host(p.nbytes(), cat, what);
    return adopt_buffer(b, hb, p.meta());
  }
  return empty_tensor(b, p.meta(), cat, kCurrent, what);
}
}  // namespace

AdamW::AdamW(Backend& backend, std::vector<OptimizerParam*> params, AdamWOptions options)
    : b_(backend), params_(std::move(params)), o_(options) {}

void AdamW::ensure_state(size_t i) {
  if (exp_avg_.empty()) {
    exp_avg_.resize(params_.size());
    exp_avg_sq_.resize(params_.size());
  }
  if (exp_avg_[i]) return;
  Tensor p = params_[i]->local_tensor();
  const std::string& n = params_[i]->param().fqn;
  exp_avg_[i] = like(b_, p, MemCategory::kOptimizerState, n + " exp_avg");
  ops::fill_zero(b_, kCurrent, exp_avg_[i], n + " exp_avg init");
  exp_avg_sq_[i] = like(b_, p, MemCategory::kOptimizerState, n + " exp_avg_sq");
  ops::fill_zero(b_, kCurrent, exp_avg_sq_[i], n + " exp_avg_sq init");
}

void AdamW::init_state() {
  for (size_t i = 0; i < params_.size(); ++i) ensure_state(i);
}

void AdamW::step() {
  ++step_;
  std::vector<size_t> active;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i]->local_grad()) active.push_back(i);
  if (active.empty()) return;
  for (size_t i : active) ensure_state(i);

  // NOTE [foreach AdamW temporaries]: _multi_tensor_adamw updates exp_avg / exp_avg_sq and
  // the parameters in place, but exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs) is a
  // new tensor per parameter, alive until the update is done.
  std::vector<Tensor> sqrt_tmp;
  if (!o_.fused) {
    for (size_t i : active)
      sqrt_tmp.push_back(like(b_, exp_avg_sq_[i], MemCategory::kTemporary,
                              params_[i]->param().fqn + " exp_avg_sq_sqrt"));
  }
  OpCall op;
  op.kind = OpKind::kAdamW;
  op.name = o_.fused ? "optimizer.step (fused AdamW)" : "optimizer.step (foreach AdamW)";
  for (size_t k = 0; k < active.size(); ++k) {
    size_t i = active[k];
    Tensor p = params_[i]->local_tensor();
    const Tensor& g = params_[i]->local_grad();
    op.inputs.insert(op.inputs.end(), {p.ref(), g.ref(), exp_avg_[i].ref(), exp_avg_sq_[i].ref()});
    op.outputs.insert(op.outputs.end(), {p.ref(), exp_avg_[i].ref(), exp_avg_sq_[i].ref()});
    if (!o_.fused) op.outputs.push_back(sqrt_tmp[k].ref());
    op.flops += 12.0 * static_cast<double>(p.numel());
    op.bytes += 7.0 * static_cast<double>(p.nbytes());
  }
  AdamWHyperparams{
      o_.fused, o_.lr, o_.beta1, o_.beta2, o_.eps, o_.weight_decay, static_cast<int64_t>(step_)}
      .encode(op);
  b_.launch(kCurrent, op);
}

void AdamW::zero_grad() {
  for (OptimizerParam* p : params_) p->local_grad() = Tensor();
}

// NOTE [foreach_norm scratch]: torch._foreach_norm on CUDA (ForeachReduceOp.cu,
// _foreach_tensor_norm_cuda_impl; the DTensor gradients of FSDP2 dispatch it on their local
// shards) first allocates output_per_tensor = at::zeros({ntensors * max_chunks_per_tensor}) in
// the output's op-math dtype (fp32 for fp32 / bf16 gradients), max_chunks_per_tensor being the
// largest ceil(numel / 65536) of the list; multi_tensor_apply runs one block per 65536-element
// chunk writing a partial there, and a cleanup kernel sums each tensor's partials into its
// result. The scratch is freed when the call returns. The model passes it to kSquaredNorm as a
// second output (the CUDA backend's kernel runs the same two stages in it: a block per chunk
// instead of one block per tensor, deterministic). Not modelled (n x 512 B, then 2 KiB): the
// per-tensor 0-d results (one 512-byte block each; the model keeps one [n] tensor, torch.stack's),
// and the [320] global_output and 0-d global_norm that recent releases also allocate. CPU offload
// runs the CPU's per-tensor path: no scratch. Its size: core/optim/foreach_norm.h.

void clip_grad_norm(Backend& b, const std::vector<OptimizerParam*>& params, double max_norm,
                    const MeshInfo& mesh) {
  std::vector<const OptimizerParam*> with_grad;
  for (OptimizerParam* p : params)
    if (p->local_grad()) with_grad.push_back(p);
  if (with_grad.empty()) return;
  // _foreach_norm: one fp32 scalar per gradient; then the stack's norm (a scalar).
  const bool host = with_grad[0]->local_grad().on_host();
  auto small = [&](int64_t n, const std::string& what) {
    TensorMeta m{DType::kFloat32, {n}};
    if (host) {
      Buffer hb = b.allocate_host(m.nbytes(), MemCategory::kTemporary, what);
      return adopt_buffer(b, hb, m);
    }
    return empty_tensor(b, m, MemCategory::kTemporary, kCurrent, what);
  };
  auto all_reduce = [&](const Tensor& t, const ProcessGroup& g, const std::string& name) {
    if (g.size() <= 1) return;
    CollectiveCall ar;
    ar.kind = CollectiveKind::kAllReduce;
    ar.op = ReduceOp::kSum;
    ar.name = name;
    ar.input = t.ref();
    ar.output = t.ref();
    b.collective(kCurrent, ar, g);
  };
  // The squared norm of `grads`, summed over this rank (a [1] fp32 tensor).
  auto squared_norm = [&](const std::vector<const OptimizerParam*>& grads,
                          const std::string& suffix) {
    std::vector<int64_t> numels;
    for (const OptimizerParam* p : grads) numels.push_back(p->local_grad().numel());
    Tensor scratch;  // NOTE [foreach_norm scratch]
    const int64_t scratch_numel = foreach_norm_scratch_numel(numels);
    if (!host && scratch_numel > 0)
      scratch = empty_tensor(b, {DType::kFloat32, {scratch_numel}}, MemCategory::kTemporary,
                              kCurrent, "clip_grad_norm _foreach_norm output_per_tensor" + suffix);
    Tensor norms =
        small(static_cast<int64_t>(grads.size()), "clip_grad_norm per-grad norms" + suffix);
    OpCall sq;
    sq.kind = OpKind::kSquaredNorm;
    sq.name = "clip_grad_norm _foreach_norm" + suffix;
    for (const OptimizerParam* p : grads) {
      sq.inputs.push_back(p->local_grad().ref());
      sq.flops += 2.0 * static_cast<double>(p->local_grad().numel());
      sq.bytes += static_cast<double>(p->local_grad().nbytes());
    }
    sq.outputs = {norms.ref()};
    if (scratch)
      sq.outputs.push_back(scratch.ref());  // scratch: op.bytes counts the gradients alone
    b.launch(kCurrent, sq);
    scratch = Tensor();
    Tensor total = small(1, "clip_grad_norm total norm" + suffix);
    OpCall red;
    red.kind = OpKind::kSum;
    red.name = "clip_grad_norm stack norm" + suffix;
    red.inputs = {norms.ref()};
    red.outputs = {total.ref()};
    b.launch(kCurrent, red);
    return total;
  };
  Tensor total;
  if (!mesh.tp_group || mesh.tp_group->size() <= 1) {
    total = squared_norm(with_grad, "");
    // DTensor Partial -> Replicate: sum the squared norms across the shard group.
    all_reduce(total, mesh.shard_group, "clip_grad_norm all_reduce");
  } else {
    std::vector<const OptimizerParam*> sharded, replicated;
    for (const OptimizerParam* p : with_grad)
      (p->param().tp_placement == TpPlacement::kReplicate ? replicated : sharded).push_back(p);
    if (!sharded.empty()) {
      total = squared_norm(sharded, " (tp-sharded)");
      all_reduce(total, *mesh.shard_tp_group, "clip_grad_norm all_reduce (shard+tp)");
    }
    if (!replicated.empty()) {
      Tensor rep = squared_norm(replicated, " (tp-replicated)");
      all_reduce(rep, mesh.shard_group, "clip_grad_norm all_reduce (shard)");
      if (!total) {
        total = std::move(rep);
      } else {
        OpCall add;
        add.kind = OpKind::kAdd;
        add.name = "clip_grad_norm total";
        add.inputs = {total.ref(), rep.ref()};
        add.outputs = {total.ref()};
        add.flops = 1;
        b.launch(kCurrent, add);
      }
    }
  }
  // torchtitan's clip_grad_norm_ with a pp mesh: each rank's norm covers its stages only, so the
  // squares are summed over the pipeline group too.
  if (mesh.pp_group) all_reduce(total, *mesh.pp_group, "clip_grad_norm all_reduce (pp)");
  // _foreach_mul_(grads, clamp(max_norm / (total + 1e-6), max=1)).
  OpCall scale;
  scale.kind = OpKind::kClipGradScale;
  scale.name = "clip_grad_norm _foreach_mul_";
  scale.inputs.push_back(total.ref());
  for (const OptimizerParam* p : with_grad) {
    scale.inputs.push_back(p->local_grad().ref());
    scale.outputs.push_back(p->local_grad().ref());
    scale.flops += static_cast<double>(p->local_grad().numel());
    scale.bytes += 2.0 * static_cast<double>(p->local_grad().nbytes());
  }
  ClipGradArgs{max_norm}.encode(scale);
  b.launch(kCurrent, scale);
}

}  // namespace fullshard
