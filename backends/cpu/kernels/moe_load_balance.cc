// DeepSeek-V3's aux-loss-free load balancing and group-limited routing on the CPU (NOTE [Expert
// bias] in core/model/expert_bias.h; contracts in docs/kernels.md): the scores a token's top-k
// is chosen from, the gather of the unbiased scores at the chosen experts, and the optimizer
// pre-step's stack and bias update. fp32 math as PyTorch's fp32 ops, sums in double rounded once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/moe_args.h"

namespace fullshard::cpu::detail {

// scores + expert_bias, then (groups > 1) _get_node_limited_routing_scores: a group's score is
// the sum of its two highest, the `limited` best groups are kept (equal scores: the lower group
// first), every other group's experts become -inf.
void moe_router_choice(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RouterChoiceArgs a = RouterChoiceArgs::decode(op);  // core/runtime/moe_args.h
  const int64_t E = a.experts, G = a.groups, per = E / G;
  const float* s = static_cast<const float*>(in[0]);
  const float* bias = in.size() > 1 ? static_cast<const float*>(in[1]) : nullptr;
  float* y = static_cast<float*>(out[0]);
  std::vector<float> group_score(static_cast<size_t>(G));
  std::vector<int64_t> order(static_cast<size_t>(G));
  for (int64_t n = 0; n < a.tokens; ++n) {
    float* row = y + n * E;
    for (int64_t e = 0; e < E; ++e) row[e] = bias ? s[n * E + e] + bias[e] : s[n * E + e];
    if (G == 1) continue;
    for (int64_t g = 0; g < G; ++g) {
      float first = -std::numeric_limits<float>::infinity(), second = first;
      for (int64_t j = 0; j < per; ++j) {
        const float v = row[g * per + j];
        if (v > first) {
          second = first;
          first = v;
        } else if (v > second) {
          second = v;
        }
      }
      group_score[static_cast<size_t>(g)] = first + second;
    }
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
      return group_score[static_cast<size_t>(p)] > group_score[static_cast<size_t>(q)];
    });
    for (int64_t r = a.limited; r < G; ++r)
      std::fill(row + order[static_cast<size_t>(r)] * per,
                row + (order[static_cast<size_t>(r)] + 1) * per,
                -std::numeric_limits<float>::infinity());
  }
}

// scores.gather(dim=1, index=indices): the unbiased scores of the chosen experts.
void moe_gather_scores(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RouterArgs a = RouterArgs::decode(op);
  const int64_t E = a.experts, K = a.top_k;
  const float* s = static_cast<const float*>(in[0]);
  const int64_t* idx = static_cast<const int64_t*>(in[1]);
  float* y = static_cast<float*>(out[0]);
  for (int64_t i = 0; i < a.tokens * K; ++i) {
    const int64_t e = idx[i];
    FULLSHARD_CHECK(e >= 0 && e < E, where(op) + "expert index out of range");
    y[i] = s[(i / K) * E + e];
  }
}

// torch.vstack of the layers' tokens_per_expert, layer l as tokens_per_expert // divisor.
void moe_expert_load_stack(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const ExpertLoadArgs a = ExpertLoadArgs::decode(op);
  float* y = static_cast<float*>(out[0]);
  for (int64_t l = 0; l < a.layers; ++l) {
    const float* t = static_cast<const float*>(in[static_cast<size_t>(l)]);
    const float d = static_cast<float>(a.divisors[static_cast<size_t>(l)]);
    for (int64_t e = 0; e < a.experts; ++e)
      y[l * a.experts + e] = d == 1.0f ? t[e] : std::floor(t[e] / d);
  }
}

// torchtitan's _update_expert_bias per layer: d = coeff * sign(mean(load) - load);
// expert_bias += d - mean(d); tokens_per_expert.zero_().
void moe_expert_bias_update(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const ExpertLoadArgs a = ExpertLoadArgs::decode(op);
  const int64_t E = a.experts, L = a.layers;
  const float* loads = static_cast<const float*>(in[0]);
  const float coeff = static_cast<float>(a.coeff);
  std::vector<float> d(static_cast<size_t>(E));
  for (int64_t l = 0; l < L; ++l) {
    const float* load = loads + l * E;
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += load[e];
    const float mean = static_cast<float>(sum / static_cast<double>(E));
    double dsum = 0;
    for (int64_t e = 0; e < E; ++e) {
      const float diff = mean - load[e];
      const float sign = diff > 0 ? 1.0f : (diff < 0 ? -1.0f : 0.0f);
      d[static_cast<size_t>(e)] = coeff * sign;
      dsum += d[static_cast<size_t>(e)];
    }
    const float dmean = static_cast<float>(dsum / static_cast<double>(E));
    float* bias = static_cast<float*>(out[static_cast<size_t>(l)]);
    float* tokens = static_cast<float*>(out[static_cast<size_t>(L + l)]);
    for (int64_t e = 0; e < E; ++e) {
      bias[e] += d[static_cast<size_t>(e)] - dmean;
      tokens[e] = 0.0f;
    }
  }
}

}  // namespace fullshard::cpu::detail
