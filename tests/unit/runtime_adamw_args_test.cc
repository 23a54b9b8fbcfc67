// decode_adamw: the one decoder of the kAdamW op both real backends' kernels use.
#include <cmath>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/common/error.h"
#include "core/runtime/adamw_args.h"

namespace fullshard {
namespace {

TensorRef ref(int64_t n) {
  TensorRef r;
  r.meta.shape = {n};
  return r;
}

OpCall adamw_op(bool fused, const std::vector<int64_t>& sizes, std::vector<double> fargs) {
  OpCall op;
  op.kind = OpKind::kAdamW;
  op.name = "optimizer.step";
  for (int64_t n : sizes) {
    for (int t = 0; t < 4; ++t) op.inputs.push_back(ref(n));
    for (int t = 0; t < (fused ? 3 : 4); ++t) op.outputs.push_back(ref(n));
  }
  op.fargs = std::move(fargs);
  op.iargs = {fused ? 1 : 0};
  return op;
}

// The scalars are torch's host-side Python-float arithmetic, rounded once to fp32.
RC_GTEST_PROP(AdamWArgs, ScalarsAreTheHostFormulasRoundedOnce, ()) {
  const double lr = *rc::gen::inRange(1, 1000) * 1e-5, wd = *rc::gen::inRange(0, 100) * 1e-3;
  const double beta1 = 0.8 + *rc::gen::inRange(0, 199) * 1e-3,
               beta2 = 0.9 + *rc::gen::inRange(0, 999) * 1e-4;
  const double eps = 1e-8, step = *rc::gen::inRange(1, 100000);
  const bool fused = *rc::gen::arbitrary<bool>();
  const auto sizes = *rc::gen::container<std::vector<int64_t>>(rc::gen::inRange<int64_t>(0, 50));
  const AdamWArgs a = decode_adamw(adamw_op(fused, sizes, {lr, beta1, beta2, eps, wd, step}));
  RC_ASSERT(a.fused == fused);
  RC_ASSERT(a.params == sizes.size());
  RC_ASSERT(a.outputs_per_param == (fused ? 3u : 4u));
  RC_ASSERT(a.decay == static_cast<float>(1.0 - lr * wd));
  RC_ASSERT(a.one_minus_beta1 == static_cast<float>(1.0 - beta1));
  RC_ASSERT(a.one_minus_beta2 == static_cast<float>(1.0 - beta2));
  RC_ASSERT(a.beta2 == static_cast<float>(beta2));
  RC_ASSERT(a.neg_step_size == static_cast<float>(-lr / (1.0 - std::pow(beta1, step))));
  RC_ASSERT(a.bias_correction2_sqrt == static_cast<float>(std::sqrt(1.0 - std::pow(beta2, step))));
  RC_ASSERT(a.eps == static_cast<float>(eps));
}

TEST(AdamWArgs, MalformedOpsAreInternalErrorsNamingTheOp) {
  const std::vector<double> f{1e-3, 0.9, 0.95, 1e-8, 0.1, 1};
  OpCall few_fargs = adamw_op(true, {4}, {1e-3, 0.9});
  OpCall step0 = adamw_op(true, {4}, {1e-3, 0.9, 0.95, 1e-8, 0.1, 0});
  OpCall bad_outputs = adamw_op(false, {4, 5}, f);
  bad_outputs.outputs.pop_back();
  OpCall bad_size = adamw_op(true, {4, 5}, f);
  bad_size.inputs[6] = ref(7);  // parameter 1's exp_avg
  OpCall not_adamw = adamw_op(true, {4}, f);
  not_adamw.kind = OpKind::kFill;
  for (const OpCall* op : {&few_fargs, &step0, &bad_outputs, &bad_size, &not_adamw}) {
    try {
      decode_adamw(*op);
      ADD_FAILURE() << "accepted a malformed op";
    } catch (const InternalError& e) {
      EXPECT_NE(std::string(e.what()).find("'optimizer.step'"), std::string::npos) << e.what();
    }
  }
  try {
    decode_adamw(bad_size);
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 1: sizes differ"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fullshard
