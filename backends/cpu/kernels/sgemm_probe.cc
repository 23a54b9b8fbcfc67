#include "backends/cpu/kernels/sgemm_probe.h"

#include <chrono>
#include <vector>

#include <fmt/format.h>

#include "backends/cpu/kernels/gemm.h"

namespace fullshard::cpu {

SgemmProbe probe_sgemm(double seconds, int64_t n) {
  const auto count = static_cast<size_t>(n * n);
  std::vector<float> a(count), b(count), c(count, 0.0f);
  for (size_t i = 0; i < count; ++i) {
    a[i] = static_cast<float>(i % 13) * 0.01f;
    b[i] = static_cast<float>(i % 7) * 0.02f;
  }
  auto once = [&] {
    detail::gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  once();  // warm-up: page faults, OpenBLAS's buffers
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  int calls = 0;
  double elapsed = 0;
  while (calls < 3 || elapsed < seconds) {
    once();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  SgemmProbe p;
  p.flops_per_s = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) *
                  calls / elapsed;
  p.source = fmt::format(
      "OpenBLAS sgemm {}x{}x{}, {} thread{}, {} calls in {:.2f} s at worker start-up", n, n, n,
      openblas_get_num_threads(), openblas_get_num_threads() == 1 ? "" : "s", calls, elapsed);
  return p;
}

}  // namespace fullshard::cpu
