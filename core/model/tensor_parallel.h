#pragma once
// Tensor parallelism with sequence parallelism (torchtitan's apply_tp in parallelize_llama):
// the plan that places each Llama parameter over the tp mesh dim, and the collectives DTensor
// issues between the layouts, as differentiable ops. NOTE [Tensor-parallel plan] in
// tensor_parallel.cc.
#include <cstdint>
#include <string>

#include "core/mesh/device_mesh.h"
#include "core/model/autograd.h"
#include "core/model/model_config.h"

namespace fullshard {

// This rank's view of the tp mesh dim.
struct TensorParallel {
  int degree = 1;             // size of the tp dim; 1 = no tensor parallelism
  int index = 0;              // this rank's coordinate along it
  ProcessGroup group;         // the tp group of this rank (ordered by that coordinate)
  bool loss_parallel = true;  // vocab-sharded logits into a vocab-parallel cross-entropy
  bool async = false;  // torchtitan's enable_async_tp: collective-matmuls (core/model/async_tp.h)
  bool enabled() const { return degree > 1; }
};

// What a model must satisfy to be split `degree` ways (heads, kv heads, ffn_dim, vocab and
// the sequence divisible). Throws InputError naming the field, its value and
// the fix. `seq_len` is training.seq_len (sequence parallelism shards it). The loss must be
// model.implementation.loss fp32_logits with loss parallel (DTensor's handlers compute in fp32)
// and may not be fp32_output (the model's .float() before the vocab gather is not modelled).
void check_tensor_parallel(const ModelConfig& c, int64_t seq_len, int degree,
                           bool loss_parallel = true);

// parallelize_module(model, tp_mesh, plan) for a Llama or GPT-2 module tree: sets every
// parameter's local shape and placement (TpPlacement) for this rank.
void apply_tensor_parallel(Module& root, const TensorParallel& tp);

namespace ops::tp {

// The tensors behind all_gather_sequence / reduce_scatter_sequence (without autograd):
// [B, S/tp, D] -> [B, S, D] gathered over the tp group, and [B, S, D] -> [B, S/tp, D] summed
// over it; the result in `cat`, the staging buffers temporaries freed on return.
Tensor gather_seq(Backend& b, const Tensor& x, const TensorParallel& tp, MemCategory cat,
                  const std::string& name);
Tensor scatter_seq(Backend& b, const Tensor& x, const TensorParallel& tp, MemCategory cat,
                   const std::string& name);

// Shard(1) -> Replicate of a sequence-sharded [B, S/tp, D] activation (PrepareModuleInput
// before attention / feed_forward / output): funcol.all_gather_tensor(gather_dim=1), i.e. an
// all_gather_into_tensor into [tp*B, S/tp, D] on the current stream, then
// cat(chunk(.., tp, 0), 1), a copy. Backward: the reduce-scatter below.
Value all_gather_sequence(ExecContext& c, Value x, const TensorParallel& tp,
                          const std::string& name);

// Partial -> Shard(1) of a [B, S, D] partial sum (RowwiseParallel's output, the vocab-parallel
// embedding's output): funcol.reduce_scatter_tensor(scatter_dim=1), i.e. cat(chunk(.., tp, 1))
// into [tp*B, S/tp, D] (a copy), then a sum reduce-scatter. Backward: the all-gather above.
Value reduce_scatter_sequence(ExecContext& c, Value x, const TensorParallel& tp,
                              const std::string& name);

// Shard(-1) -> Replicate of vocab-sharded logits [B, S, V/tp] (ColwiseParallel output without
// loss parallel): all_gather_into_tensor into [tp, B*S, V/tp], then cat along the last dim.
// Backward: Replicate -> Shard(-1), this rank's columns of the gradient (a contiguous copy).
Value all_gather_last_dim(ExecContext& c, Value x, const TensorParallel& tp,
                          const std::string& name);

// RowwiseParallel's nn.Linear with a replicated bias (weight Shard(1), input [.., K/tp]): the
// partial sum x W^T + bias / tp, to be reduce-scattered; the backward takes the bias gradient
// from the (all-gathered, Replicate) output gradient. NOTE [GPT-2 tensor-parallel plan].
Value rowwise_linear(ExecContext& c, Value x, const Param& weight, const Param& bias,
                     const TensorParallel& tp, const std::string& name);

// Partial -> Replicate of a parameter's gradient (FSDPParam._get_grad_inner_tensor:
// grad.redistribute(placements=tp placements) for a sequence-parallel norm weight): funcol
// all_reduce clones, then sums in place. Returns the clone.
Tensor all_reduce_grad(Backend& b, const Tensor& grad, const ProcessGroup& group,
                       const std::string& name);

// funcol.all_reduce(t, op, group) on the current stream: a clone of `t` (in `category`),
// reduced in place; returns the clone.
Tensor all_reduce_clone(Backend& b, const Tensor& t, ReduceOp op, const ProcessGroup& group,
                        MemCategory category, const std::string& name);

// F.cross_entropy(logits.float(), labels) under torch.distributed.tensor.parallel.loss_parallel
// on vocab-sharded logits [B, S, V/tp]: DTensor's _log_softmax handler (amax, all-reduce max,
// x - max, exp, sum, all-reduce sum, log, shifted - logsumexp: one autograd node saving its
// fp32 output) and _nll_loss handlers (this rank's targets picked, all-reduce sum, mean; the
// backward computes softmax - one_hot on the local columns, the log_softmax backward passes it
// through). NOTE [Loss parallel] in loss_parallel.cc.
Value vocab_parallel_cross_entropy(ExecContext& c, Value logits, const Tensor& labels,
                                   const TensorParallel& tp, const std::string& name);

}  // namespace ops::tp
}  // namespace fullshard
