#pragma once
// torchao's Float8Linear (torchao/float8/float8_linear.py, matmul_with_hp_or_float8_args, at
// pytorch/ao@36027d8) op by op: the dynamic casts of input, weight and grad_output per recipe,
// torch._scaled_mm for output, grad_input and grad_weight (grad_weight in high precision for
// rowwise_with_gw_hp), and its autograd node, which saves the high-precision input and the
// weight as torchao's does. NOTE [Float8 casts] in float8_linear.cc; docs/float8.md.
#include <string>

#include "core/model/autograd.h"

namespace fullshard::ops {

// One operand cast to float8: the float8 data and its fp32 scale ([1], or one per row / column).
struct Float8Cast {
  Tensor data;
  Tensor scale;
};

// How one operand is cast: torchao's CastConfig as the recipe sets it.
struct Float8CastSpec {
  DType target = DType::kFloat8E4M3FN;
  bool axiswise = false;  // one scale per row (axis -1) or per column (axis 0) of [rows, cols]
  int axis = -1;
  bool pow2 = false;  // round_scales_to_power_of_2 (the rowwise recipes)
};

// hp_tensor_to_float8_dynamic of x viewed as [rows, cols] on `stream`: eager (abs, max, the
// scale's small kernels, .to(fp32), * scale, clamp, .to(float8)) or, compiled, an amax kernel
// and one cast kernel. `precomputed` (fp32 [1]) skips the amax and the scale
// (hp_tensor_and_scale_to_float8); `amax_group` (not null) all-reduces the amax (MAX) over it
// (fsdp_pre_all_gather's reduce_amax).
Float8Cast cast_to_float8(Backend& b, StreamRole stream, const Tensor& x, int64_t rows,
                          int64_t cols, const Float8CastSpec& spec, bool compiled,
                          const Tensor* precomputed, const ProcessGroup* amax_group,
                          MemCategory cat, const std::string& name);

// y = x W^T through torchao's Float8Linear for weight.float8's recipe (no bias: torchtitan's
// Llama linears have none; the scenario refuses the others).
Value float8_linear(ExecContext& c, Value x, const Param& weight, const std::string& name);

}  // namespace fullshard::ops

namespace fullshard {

// torchtitan's Float8LinearConverter.convert over the module tree: marks every Linear weight
// that float8_converts (NOTE [Which linears convert] in float8_config.cc) with the recipe;
// `compile_blocks`: the blocks (layers.N) run compiled; `float8_all_gather`: FSDP2 all-gathers
// the converted weights in float8. Returns how many linears converted.
int convert_to_float8_training(Module& root, const Float8Training& f, bool compile_blocks,
                               bool float8_all_gather);

}  // namespace fullshard
