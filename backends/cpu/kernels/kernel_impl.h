#pragma once
// Internal to the CPU kernels: one function per OpKind (or family), called by run_kernel
// (dispatch.cc). Contracts are in docs/kernels.md.
#include <vector>

#include "core/runtime/op.h"
#include "core/runtime/rope_args.h"

namespace fullshard::cpu::detail {

using Ptrs = std::vector<void*>;

// elementwise.cc
void fill(const OpCall& op, const Ptrs& in, const Ptrs& out);
void copy(const OpCall& op, const Ptrs& in, const Ptrs& out);
void add(const OpCall& op, const Ptrs& in, const Ptrs& out);
void scale(const OpCall& op, const Ptrs& in, const Ptrs& out);
void silu(const OpCall& op, const Ptrs& in, const Ptrs& out);
void silu_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void gelu(const OpCall& op, const Ptrs& in, const Ptrs& out);
void gelu_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void mul(const OpCall& op, const Ptrs& in, const Ptrs& out);
void mul_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);

// embedding.cc
void embedding(const OpCall& op, const Ptrs& in, const Ptrs& out);
void embedding_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void position_embedding(const OpCall& op, const Ptrs& in, const Ptrs& out);
void position_embedding_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);

// norm.cc
void rms_norm(const OpCall& op, const Ptrs& in, const Ptrs& out);
void rms_norm_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
// One row of RMSNorm's backward, shared by the eager and the compiled kernels: g (the output
// gradient) becomes the input gradient, x (the input) becomes x * rstd, and g * x * rstd is
// added to the weight gradient gw; D elements each.
void rms_norm_row_backward(float* g, float* x, const float* w, float rstd, double* gw, int64_t D);
void layer_norm(const OpCall& op, const Ptrs& in, const Ptrs& out);
void layer_norm_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);

// nf4.cc (NOTE [NF4] in core/tensor/nf4.cc)
void nf4_quantize(const OpCall& op, const Ptrs& in, const Ptrs& out);
void nf4_dequantize(const OpCall& op, const Ptrs& in, const Ptrs& out);
// float8.cc (NOTE [Float8 on the CPU])
void float8_abs(const OpCall& op, const Ptrs& in, const Ptrs& out);
void float8_amax(const OpCall& op, const Ptrs& in, const Ptrs& out);
void float8_scale(const OpCall& op, const Ptrs& in, const Ptrs& out);
void float8_cast(const OpCall& op, const Ptrs& in, const Ptrs& out);
void scaled_mm(const OpCall& op, const Ptrs& in, const Ptrs& out);  // the three kScaledMM* kinds

// linear.cc
void linear(const OpCall& op, const Ptrs& in, const Ptrs& out);
void linear_backward_input(const OpCall& op, const Ptrs& in, const Ptrs& out);
void linear_backward_weight(const OpCall& op, const Ptrs& in, const Ptrs& out);
void linear_backward_bias(const OpCall& op, const Ptrs& in, const Ptrs& out);

// rope.cc
// The rotation of one tensor laid out as `a` decodes it (sign -1: the backward; adjacent:
// kRoPEComplex's pairs); kRoPE* and kCompiledRoPE* run it.
void rope_rotate(const RopeArgs& a, const void* x, DType x_dtype, void* y, DType y_dtype,
                 float sign, bool adjacent);
void rope(const OpCall& op, const Ptrs& in, const Ptrs& out);
void rope_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void rope_complex(const OpCall& op, const Ptrs& in, const Ptrs& out);
void rope_complex_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void rotary_cos_sin(const OpCall& op, const Ptrs& in, const Ptrs& out);
void rotate_half_cat(const OpCall& op, const Ptrs& in, const Ptrs& out);

// ring_attention.cc (context parallelism)
void sdpa_merge(const OpCall& op, const Ptrs& in, const Ptrs& out);
void seq_rows_add(const OpCall& op, const Ptrs& in, const Ptrs& out);
// attention.cc
void attention(const OpCall& op, const Ptrs& in, const Ptrs& out);
void attention_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);

// loss.cc
void log_softmax(const OpCall& op, const Ptrs& in, const Ptrs& out);
void log_softmax_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void nll_loss(const OpCall& op, const Ptrs& in, const Ptrs& out);
void nll_loss_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);

// fsdp_copy.cc
void all_gather_copy_in(const OpCall& op, const Ptrs& in, const Ptrs& out);
void all_gather_copy_out(const OpCall& op, const Ptrs& in, const Ptrs& out);
void chunk_cat(const OpCall& op, const Ptrs& in, const Ptrs& out);

// optim.cc
void squared_norm(const OpCall& op, const Ptrs& in, const Ptrs& out);
void sum(const OpCall& op, const Ptrs& in, const Ptrs& out);
void clip_grad_scale(const OpCall& op, const Ptrs& in, const Ptrs& out);
void adamw(const OpCall& op, const Ptrs& in, const Ptrs& out);

// eager.cc (the kernels of eager decompositions, model.implementation)
void pow_scalar(const OpCall& op, const Ptrs& in, const Ptrs& out);
void add_scalar(const OpCall& op, const Ptrs& in, const Ptrs& out);
void rsqrt(const OpCall& op, const Ptrs& in, const Ptrs& out);
void mul_broadcast(const OpCall& op, const Ptrs& in, const Ptrs& out);
void sum_last_dim(const OpCall& op, const Ptrs& in, const Ptrs& out);
void sum_leading_dims(const OpCall& op, const Ptrs& in, const Ptrs& out);
void expand_last_dim(const OpCall& op, const Ptrs& in, const Ptrs& out);
void repeat_kv(const OpCall& op, const Ptrs& in, const Ptrs& out);
void repeat_kv_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void narrow_copy(const OpCall& op, const Ptrs& in, const Ptrs& out);
void transpose_blocks(const OpCall& op, const Ptrs& in, const Ptrs& out);
void row_max(const OpCall& op, const Ptrs& in, const Ptrs& out);
void sub_row(const OpCall& op, const Ptrs& in, const Ptrs& out);
void exp_kernel(const OpCall& op, const Ptrs& in, const Ptrs& out);
void log_kernel(const OpCall& op, const Ptrs& in, const Ptrs& out);
void nll_vocab_parallel(const OpCall& op, const Ptrs& in, const Ptrs& out);
void nll_vocab_parallel_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);

// compiled.cc: torch.compile's fused regions of a Llama block
void compiled_rms_norm(const OpCall& op, const Ptrs& in, const Ptrs& out);
void compiled_add_rms_norm(const OpCall& op, const Ptrs& in, const Ptrs& out);
void compiled_rms_norm_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void compiled_rope(const OpCall& op, const Ptrs& in, const Ptrs& out);  // and its backward
void compiled_silu_mul(const OpCall& op, const Ptrs& in, const Ptrs& out);
void compiled_silu_mul_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void compiled_residual_add(const OpCall& op, const Ptrs& in, const Ptrs& out);

// moe_router.cc, moe_reorder.cc, moe_grouped_mm.cc: the mixture-of-experts kinds (docs/moe.md),
// which the op table still marks simulator-only; has_kernel lists them (dispatch.cc).
void moe_softmax(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_softmax_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_sigmoid(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_sigmoid_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_topk(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_topk_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_route_norm(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_route_norm_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_histogram(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_expert_capacity(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_router_choice(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_gather_scores(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_expert_load_stack(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_expert_bias_update(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_add_sum_rows(const OpCall& op, const Ptrs& in, const Ptrs& out);  // moe_aux_loss.cc
void moe_aux_loss(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_aux_loss_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_weighted_sum(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_weighted_sum_backward(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_argsort(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_floor_divide(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_gather_rows(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_scatter_rows(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_index_add_rows(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_pad_row(const OpCall& op, const Ptrs& in, const Ptrs& out);
void moe_permute_indices(const OpCall& op, const Ptrs& in, const Ptrs& out);
void grouped_mm(const OpCall& op, const Ptrs& in, const Ptrs& out);
void grouped_mm_backward_input(const OpCall& op, const Ptrs& in, const Ptrs& out);
void grouped_mm_backward_weight(const OpCall& op, const Ptrs& in, const Ptrs& out);

}  // namespace fullshard::cpu::detail
