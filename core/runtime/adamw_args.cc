#include "core/runtime/adamw_args.h"

#include <cmath>
#include <string>

#include "core/common/error.h"
#include "core/runtime/op_args.h"

namespace fullshard {

AdamWArgs AdamWArgs::decode(const OpCall& op) {
  const std::string where = op_where(op);
  FULLSHARD_CHECK(op.kind == OpKind::kAdamW, where + "is not an AdamW op");
  FULLSHARD_CHECK(op.fargs.size() >= 6,
                  where + "needs fargs = {lr, beta1, beta2, eps, weight_decay, step}");
  AdamWArgs a;
  a.fused = !op.iargs.empty() && op.iargs[0] != 0;
  a.outputs_per_param = a.fused ? 3 : 4;
  FULLSHARD_CHECK(
      op.inputs.size() % 4 == 0 && op.outputs.size() == op.inputs.size() / 4 * a.outputs_per_param,
      where + "expects 4 inputs and " + std::to_string(a.outputs_per_param) +
          " outputs per parameter");
  a.params = op.inputs.size() / 4;
  const double lr = op.fargs[0], beta1 = op.fargs[1], beta2 = op.fargs[2], eps = op.fargs[3],
               wd = op.fargs[4];
  const double step = op.fargs[5];
  FULLSHARD_CHECK(step >= 1, where + "step must be >= 1");
  const double bc1 = 1.0 - std::pow(beta1, step), bc2 = 1.0 - std::pow(beta2, step);
  a.decay = static_cast<float>(1.0 - lr * wd);
  a.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  a.beta2 = static_cast<float>(beta2);
  a.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  a.neg_step_size = static_cast<float>(-(lr / bc1));
  a.bias_correction2_sqrt = static_cast<float>(std::sqrt(bc2));
  a.eps = static_cast<float>(eps);
  for (size_t k = 0; k < a.params; ++k) {
    const size_t i = 4 * k, o = a.outputs_per_param * k;
    const int64_t n = op.inputs[i].meta.numel();
    for (size_t t = 1; t < 4; ++t)
      FULLSHARD_CHECK(op.inputs[i + t].meta.numel() == n,
                      where + "parameter " + std::to_string(k) + ": sizes differ");
    for (size_t t = 0; t < a.outputs_per_param; ++t)
      FULLSHARD_CHECK(op.outputs[o + t].meta.numel() == n,
                      where + "parameter " + std::to_string(k) + ": sizes differ");
  }
  return a;
}

}  // namespace fullshard
