#pragma once
// The ops of torchtitan's MoE layer (torchtitan/models/moe/moe.py and utils.py at
// pytorch/torchtitan@08dc75a), each allocating its outputs, launching its kernel with its cost
// and recording the autograd node PyTorch eager records, saving what it saves (docs/ops.md,
// "Mixture of experts"). Index tensors are int64 (PyTorch's permutation and offsets are int32:
// docs/moe.md says what that costs).
#include <string>
#include <utility>

#include "core/model/autograd.h"
#include "core/model/moe_config.h"

namespace fullshard::ops::moe {

// F.softmax(x, dim=1) / torch.sigmoid(x) over fp32 scores [N, E]; the node saves the output.
Value softmax(ExecContext& c, Value x, const std::string& name);
Value sigmoid(ExecContext& c, Value x, const std::string& name);

// torch.topk(scores, k, dim=1): values [N, K] and int64 indices [N, K] (no grad); the node
// saves the indices.
std::pair<Value, Tensor> topk(ExecContext& c, Value scores, int64_t k, const std::string& name);

// The scores the top-k is chosen from (NOTE [Expert bias] in core/model/expert_bias.h): fp32
// [N, E] scores + `bias` (an fp32 [E] buffer; empty: none), each token's experts outside its
// `limited` best of `groups` groups set to -inf. No grad (the choice's values are discarded).
Tensor router_choice(ExecContext& c, const Tensor& scores, const Tensor& bias, int64_t groups,
                     int64_t limited, const std::string& name);
// scores.gather(1, indices) [N, K]: GatherBackward0 saves the indices and scatters the gradient
// into zeros [N, E] (kTopKBackward's kernel).
Value gather_scores(ExecContext& c, Value scores, const Tensor& indices, const std::string& name);

// s / (s.sum(-1, keepdim=True) + 1e-20) (route_norm): saves s and the denominator [N].
Value route_norm(ExecContext& c, Value s, const std::string& name);
// s * factor (a Python scalar: the node saves nothing).
Value scale(ExecContext& c, Value s, double factor, const std::string& name);

// torch.histc(indices, bins=E, min=0, max=E): fp32 [E], no grad.
Tensor histogram(ExecContext& c, const Tensor& indices, int64_t experts, const std::string& name);
// Token dropping (NOTE [Capacity factor] in core/model/moe_routing.h): a new int64 [N, K] of
// the indices with each expert's slots past `capacity` set to `experts`, chosen by `scores`
// ([N, K] fp32, the routing scores; policy kProbs) or token order (kPosition). No grad.
Tensor drop_over_capacity(ExecContext& c, const Tensor& scores, const Tensor& indices,
                          int64_t experts, int64_t capacity, MoeDropPolicy policy,
                          const std::string& name);
// torch.argsort(indices.view(-1), stable=True): int64 [numel].
Tensor argsort(ExecContext& c, const Tensor& indices, const std::string& name);
// indices // divisor: int64.
Tensor floor_divide(ExecContext& c, const Tensor& indices, int64_t divisor,
                    const std::string& name);

// x[index] over rows of x [R, W] -> [M, W]; IndexBackward0 saves the index and scatter-adds the
// gradient into zeros [R, W].
Value gather_rows(ExecContext& c, Value x, const Tensor& index, const std::string& name);
// out = zeros / new_empty [rows, W]; out[index] = src (index_put_); IndexPutBackward0 saves the
// index and gathers the gradient's rows.
Value scatter_rows(ExecContext& c, Value src, const Tensor& index, int64_t rows,
                   const std::string& name);
// torch.vstack((x, x.new_zeros(W))): [R + 1, W]; the gradient is a view of the first R rows.
Value pad_row(ExecContext& c, Value x, const std::string& name);
// x[:rows] (a view); SliceBackward0 writes the gradient into zeros of x's size (kPadRow).
Value slice_rows(ExecContext& c, Value x, int64_t rows, const std::string& name);

// generate_permute_indices + cumsum: the permutation [P] and the group end offsets [E] (no grad).
struct Permutation {
  Tensor indices, offsets;
};
Permutation permute_indices(ExecContext& c, const Tensor& tokens_per_expert, int64_t routed_tokens,
                            int64_t experts, int64_t align, const std::string& name);

// torch._grouped_mm(x [P, K], w.transpose(-2, -1), offs) for w [E, N, K] -> [P, N];
// `computed_rows` rows lie inside the groups (the FLOPs). Saves x, the weight and the offsets.
Value grouped_mm(ExecContext& c, Value x, const Param& weight, const Tensor& offsets,
                 int64_t computed_rows, const std::string& name);

// torch.bmm(w.reshape(N, 1, K), y [N, K, D]).squeeze(1) in fp32: saves w and y.
Value weighted_sum(ExecContext& c, Value w, Value y, const std::string& name);

}  // namespace fullshard::ops::moe
