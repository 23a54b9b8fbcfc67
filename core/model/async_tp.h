#pragma once
// Asynchronous tensor parallelism (tensor_parallel.async; torchtitan's enable_async_tp): the
// sequence all-gather before a sublayer's colwise linears, and the reduce-scatter after its
// rowwise linear, fused with those products into PyTorch's symmetric-memory collective-matmuls
// (torch.ops.symm_mem.fused_all_gather_matmul / fused_matmul_reduce_scatter), as inductor's
// micro-pipeline TP pass rewrites the compiled graph. NOTE [Async TP] in async_tp.cc. The
// simulator prices them (simulator/cost/collective_matmul.h); real backends refuse them.
#include <string>
#include <vector>

#include "core/model/autograd.h"
#include "core/model/tensor_parallel.h"

namespace fullshard::ops::tp {

// PrepareModuleInput's Shard(1) -> Replicate all-gather of x [B, S/tp, D] and the colwise
// linears reading its result (no bias), as one fused_all_gather_matmul: returns each x_all
// W_i^T [B, S, N_i], in `weights` order. Backward: each linear's grad_input and grad_weight
// (from the gathered x, which the op returns and the linears save), then the plain
// reduce-scatter of their sum (not fused: its input is a sum, not one product).
std::vector<Value> all_gather_linears(ExecContext& c, Value x,
                                      const std::vector<const Param*>& weights,
                                      const std::vector<std::string>& names,
                                      const TensorParallel& tp, const std::string& name);

// RowwiseParallel's linear (no bias) and its Partial -> Shard(1) reduce-scatter, as one
// fused_matmul_reduce_scatter: x [B, S, K/tp] -> [B, S/tp, N]. Backward: the output
// gradient's all-gather fused with grad_input (fused_all_gather_matmul), then grad_weight
// from the gathered gradient.
Value linear_reduce_scatter(ExecContext& c, Value x, const Param& weight, const TensorParallel& tp,
                            const std::string& name);

// Bytes of the symmetric-memory workspace a rank keeps for its tp group
// (get_symm_mem_workspace grows it to the largest request and keeps it): an all-gather's
// shard of B x S/tp x D, a reduce-scatter's two output chunks of B x S/tp x D, in the compute
// dtype. Outside the caching allocator.
uint64_t symmetric_workspace_bytes(int64_t batch, int64_t seq, int64_t dim, int tp,
                                   uint64_t dtype_bytes);

}  // namespace fullshard::ops::tp
