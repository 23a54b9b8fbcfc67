#pragma once
// Float8 training as torchao's float8 module and torchtitan's float8 converter configure it
// (scenario field training.float8, docs/float8.md): the recipe, FSDP2's float8 all-gather, the
// precomputed scales and which linears convert.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fullshard {

// torchao Float8LinearRecipeName (torchao/float8/config.py at pytorch/ao@36027d8):
//   tensorwise          input, weight e4m3 and grad_output e5m2, one scale each (cuBLAS)
//   rowwise             all e4m3, one scale per row of each operand's reduced dim, scales
//                       rounded down to a power of two (CUTLASS rowwise kernel)
//   rowwise_with_gw_hp  rowwise for output and grad_input (the weight tensorwise for
//                       grad_input), grad_weight in high precision
enum class Float8Recipe : uint8_t { kNone, kTensorwise, kRowwise, kRowwiseWithGwHp };

const char* float8_recipe_name(Float8Recipe r);  // "none", "tensorwise", ...
std::optional<Float8Recipe> float8_recipe_from_name(std::string_view name);
const std::vector<std::string>& float8_recipe_names();  // without "none"

struct Float8Training {
  Float8Recipe recipe = Float8Recipe::kNone;  // kNone: no linear converts
  // Float8LinearConfig.enable_fsdp_float8_all_gather: the weight is a
  // WeightWithDynamicFloat8CastTensor whose fsdp_pre_all_gather casts the shard to e4m3.
  bool enable_fsdp_float8_all_gather = false;
  // precompute_float8_dynamic_scale_for_fsdp after each optimizer step (torchtitan's
  // post_optimizer_hook): one all-reduce of every weight's amax.
  bool precompute_float8_dynamic_scale_for_fsdp = false;
  // torchtitan's filter_fqns: a linear whose fqn contains one of these does not convert.
  std::vector<std::string> filter_fqns;
  // "auto_filter_small_kn" in filter_fqns: torchao's _auto_filter_for_recipe thresholds.
  bool auto_filter_small_kn = false;

  bool enabled() const { return recipe != Float8Recipe::kNone; }
};

// Whether the linear `fqn` with weight [out_features, in_features] (the full shape) converts:
// torchtitan's module_filter_fn (every dim a multiple of 16, no filter_fqns substring) or, with
// auto_filter_small_kn, torchao's _auto_filter_for_tensorwise / _auto_filter_for_rowwise.
bool float8_converts(const Float8Training& f, const std::string& fqn, int64_t out_features,
                     int64_t in_features);

}  // namespace fullshard
