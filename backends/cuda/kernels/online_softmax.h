#pragma once
// NOTE [One-pass log_softmax] (rows.cu): the online (max, sum of exp) pair a thread keeps over
// its elements, and the block's combination of the pairs. Host and device code: the device
// kernel runs it, and tests/gpu/cuda_kernels_rowplan_test.cc runs it on the host against
// loss.cc's two-pass sum over the same partition of a row.
#include <cmath>

#if defined(__CUDACC__)
#define FULLSHARD_HD __host__ __device__ __forceinline__
#else
#define FULLSHARD_HD inline
#endif

namespace fullshard::cuda {

struct OnlineSum {
  float m = -INFINITY;
  double s = 0;
  // k elements: the sum is rescaled by exp(old max - new max) (in double) when the max grows;
  // -inf terms are 0 (as the CPU's expf(-inf - max)); while m is still -inf, -inf - m would be NaN.
  FULLSHARD_HD void add(const float* v, int k) {
    float lm = v[0];
    for (int i = 1; i < k; ++i) lm = fmaxf(lm, v[i]);
    if (lm > m) {
      s = m == -INFINITY ? 0.0 : s * exp(static_cast<double>(m) - static_cast<double>(lm));
      m = lm;
    }
    for (int i = 0; i < k; ++i) s += v[i] == -INFINITY ? 0.0f : expf(v[i] - m);
  }
  // This thread's share of the row's sum once the row's max is known.
  FULLSHARD_HD double scaled_to(float row_max) const {
    return m == -INFINITY ? 0.0 : s * exp(static_cast<double>(m) - static_cast<double>(row_max));
  }
};

}  // namespace fullshard::cuda

#undef FULLSHARD_HD
