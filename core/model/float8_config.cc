#include "core/model/float8_config.h"

namespace fullshard {

const char* float8_recipe_name(Float8Recipe r) {
  switch (r) {
    case Float8Recipe::kNone: return "none";
    case Float8Recipe::kTensorwise: return "tensorwise";
    case Float8Recipe::kRowwise: return "rowwise";
    case Float8Recipe::kRowwiseWithGwHp: return "rowwise_with_gw_hp";
  }
  return "none";
}

const std::vector<std::string>& float8_recipe_names() {
  static const std::vector<std::string> names = {"tensorwise", "rowwise", "rowwise_with_gw_hp"};
  return names;
}

std::optional<Float8Recipe> float8_recipe_from_name(std::string_view name) {
  for (Float8Recipe r : {Float8Recipe::kNone, Float8Recipe::kTensorwise, Float8Recipe::kRowwise,
                         Float8Recipe::kRowwiseWithGwHp})
    if (name == float8_recipe_name(r)) return r;
  return std::nullopt;
}

// NOTE [Which linears convert]: torchtitan's Float8LinearConverter converts every nn.Linear for
// which its filter returns True (torchtitan/components/quantization/utils.py module_filter_fn at
// pytorch/torchtitan@b5bcd76): both dims multiples of 16 (the float8 tensor cores' requirement)
// and no filter_fqns entry a substring of the fqn (torchtitan's recipes pass ["output"], the
// output projection). "auto_filter_small_kn" swaps in torchao's _auto_filter_for_recipe
// (torchao/float8/float8_linear_utils.py at pytorch/ao@36027d8), which also skips linears too
// small to gain, with weight [N, K]: tensorwise skips K <= 4096 and N <= 1024; rowwise skips
// N <= 2048, K <= 1024, or N <= 4096 and K <= 2048 (rowwise_with_gw_hp has no auto filter:
// torchao raises, and the scenario refuses it). The shapes are the full ones: torchtitan
// converts before parallelizing.
bool float8_converts(const Float8Training& f, const std::string& fqn, int64_t out_features,
                     int64_t in_features) {
  if (!f.enabled()) return false;
  for (const std::string& s : f.filter_fqns)
    if (fqn.find(s) != std::string::npos) return false;
  const int64_t N = out_features, K = in_features;
  if (N % 16 != 0 || K % 16 != 0) return false;
  if (!f.auto_filter_small_kn) return true;
  if (f.recipe == Float8Recipe::kTensorwise) return !(K <= 4096 && N <= 1024);
  if (N <= 2048 || K <= 1024) return false;
  return !(N <= 4096 && K <= 2048);
}

}  // namespace fullshard
