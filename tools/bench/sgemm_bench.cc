// OpenBLAS sgemm throughput on this machine (the ceiling the CPU backend's training step is
// measured against): row-major NN products of n x n matrices, reported as FLOP/s.
//   build/bin/bench_sgemm [--benchmark_filter=...]   (OPENBLAS_NUM_THREADS sets the threads)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <vector>

static void BM_Sgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * n * n * n * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Sgemm)->Arg(768)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
