// Times the memory-bound CUDA kernels of a training step at the 1B benchmark's shapes
// (scenarios/llama-1b-h100-bench.json: 8192 tokens a step, vocab 128256, dim 2048, ffn 8192, one
// rank holding all 147 parameters) and prints each kernel's achieved bandwidth against the GPU's
// peak. Bytes are the op's unavoidable traffic (every operand read once, every output written
// once), so the figure is comparable to PyTorch's kernels (measured-h200.csv's bytes / time_s).
// Usage: cuda_row_kernels_bench [--iters N] [--peak-gbs GB/s]; exits 77 without a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/kernels/compiled_launchers.h"
#include "backends/cuda/kernels/index_math.h"
#include "backends/cuda/kernels/launchers.h"

namespace {

using namespace fullshard::cuda;

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda_row_kernels_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct Buffers {
  std::vector<void*> all;
  void* get(size_t bytes) {
    void* p = nullptr;
    ok(cudaMalloc(&p, bytes), "cudaMalloc");
    ok(cudaMemset(p, 0, bytes), "cudaMemset");
    all.push_back(p);
    return p;
  }
  ~Buffers() {
    for (void* p : all) cudaFree(p);
  }
};

struct Bench {
  cudaStream_t s = nullptr;
  int iters = 20;
  double peak = 0;  // bytes/s
  // Median time of `iters` runs after one warm-up.
  void run(const std::string& name, double bytes, const std::function<void()>& f) {
    cudaEvent_t a, b;
    ok(cudaEventCreate(&a), "event");
    ok(cudaEventCreate(&b), "event");
    f();
    ok(cudaStreamSynchronize(s), name.c_str());
    std::vector<float> ms;
    for (int i = 0; i < iters; ++i) {
      ok(cudaEventRecord(a, s), "record");
      f();
      ok(cudaEventRecord(b, s), "record");
      ok(cudaEventSynchronize(b), name.c_str());
      float t = 0;
      ok(cudaEventElapsedTime(&t, a, b), "elapsed");
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double sec = ms[ms.size() / 2] * 1e-3;
    std::printf("%-44s %10.1f us %9.1f GB/s %6.1f%% of peak\n", name.c_str(), sec * 1e6,
                bytes / sec / 1e9, peak > 0 ? 100.0 * bytes / sec / peak : 0.0);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
};

}  // namespace

int main(int argc, char** argv) {
  Bench bench;
  double peak_gbs = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      bench.iters = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--peak-gbs") && i + 1 < argc) {
      peak_gbs = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--iters N] [--peak-gbs GB/s]\n", argv[0]);
      return 2;
    }
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    std::printf("cuda_row_kernels_bench: no CUDA device, skipping\n");
    return 77;
  }
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, 0), "properties");
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaGetLastError();
  // DDR: two transfers a clock over the bus.
  bench.peak = peak_gbs > 0 ? peak_gbs * 1e9 : 2.0 * clock_khz * 1e3 * (prop.memoryBusWidth / 8.0);
  std::printf("%s: peak %.0f GB/s (%s), median of %d runs\n", prop.name, bench.peak / 1e9,
              peak_gbs > 0 ? "--peak-gbs" : "memory clock x bus width", bench.iters);
  ok(cudaStreamCreate(&bench.s), "stream");
  const cudaStream_t s = bench.s;
  constexpr int kF32c = kF32, kBF16c = kBF16;
  const int64_t M = 8192, V = 128256, D = 2048, F = 8192;

  {  // cross-entropy, fp32 logits (loss = fp32_logits)
    Buffers b;
    const size_t mv = static_cast<size_t>(M * V) * 4;
    void *x = b.get(mv), *y = b.get(mv), *g = b.get(mv), *gx = b.get(mv);
    auto* labels = static_cast<int64_t*>(b.get(static_cast<size_t>(M) * 8));
    void *loss = b.get(4), *tw = b.get(4), *gl = b.get(4);
    bench.run("log_softmax fp32 [8192,128256]", 2.0 * mv,
              [&] { launch::log_softmax(x, kF32c, y, kF32c, M, V, s); });
    bench.run("nll_loss fp32", M * 12.0,
              [&] { launch::nll_loss(y, kF32c, labels, loss, tw, kF32c, M, V, -100, s); });
    bench.run("nll_loss_backward fp32 [8192,128256]", 1.0 * mv, [&] {
      launch::nll_loss_backward(gl, kF32c, labels, tw, kF32c, g, kF32c, M, V, -100, s);
    });
    bench.run("log_softmax_backward fp32 [8192,128256]", 3.0 * mv,
              [&] { launch::log_softmax_backward(g, kF32c, y, kF32c, gx, kF32c, M, V, s); });
  }
  {  // RMSNorm bf16 [8192, 2048], eager and the compiled add + RMSNorm
    Buffers b;
    const size_t md = static_cast<size_t>(M * D) * 2;
    void *x = b.get(md), *a = b.get(md), *y = b.get(md), *w = b.get(D * 2), *g = b.get(md),
         *gx = b.get(md);
    void* gw = b.get(D * 2);
    auto* rstd = static_cast<float*>(b.get(M * 4));
    bench.run("rms_norm bf16 [8192,2048]", 2.0 * md + M * 4,
              [&] { launch::rms_norm(x, kBF16c, w, kBF16c, y, kBF16c, rstd, M, D, 1e-5, s); });
    bench.run("compiled add+rms_norm bf16 [8192,2048]", 3.0 * md + M * 4, [&] {
      launch::compiled_rms_norm(x, kBF16c, a, kBF16c, w, kBF16c, y, kBF16c, rstd, M, D, 1e-5, s);
    });
    bench.run("rms_norm_backward bf16 [8192,2048]", 3.0 * md + M * 4, [&] {
      launch::norm_backward(g, kBF16c, x, kBF16c, nullptr, rstd, w, kBF16c, gx, kBF16c, gw, kBF16c,
                            nullptr, 0, M, D, s);
    });
  }
  {  // SwiGLU's SiLU * mul, bf16 [8192, 8192]
    Buffers b;
    const size_t mf = static_cast<size_t>(M * F) * 2;
    void *a = b.get(mf), *c = b.get(mf), *y = b.get(mf), *g = b.get(mf), *ga = b.get(mf),
         *gc = b.get(mf);
    bench.run("compiled silu*mul bf16 [8192,8192]", 3.0 * mf,
              [&] { launch::compiled_silu_mul(a, kBF16c, c, kBF16c, y, kBF16c, M * F, s); });
    bench.run("compiled silu*mul backward bf16 [8192,8192]", 5.0 * mf, [&] {
      launch::compiled_silu_mul_backward(g, kBF16c, a, kBF16c, c, kBF16c, ga, kBF16c, gc, kBF16c,
                                         M * F, s);
    });
    bench.run("silu bf16 [8192,8192] (eager)", 2.0 * mf, [&] {
      launch::elementwise(launch::Ew::kSiLU, a, kBF16c, nullptr, 0, y, kBF16c, M * F, 0.0f, s);
    });
  }
  {  // AdamW (fused, fp32 states) and the gradient norm over the 1B model's 147 parameters
    std::vector<int64_t> sizes = {V * D};
    for (int l = 0; l < 16; ++l)
      for (int64_t n : {D * D, 512 * D, 512 * D, D * D, F * D, D * F, F * D, D, D})
        sizes.push_back(n);
    sizes.push_back(D);
    sizes.push_back(V * D);
    Buffers b;
    std::vector<launch::AdamTensor> t;
    std::vector<launch::ReduceItem> items;
    double bytes = 0, gbytes = 0;
    for (int64_t n : sizes) {
      const size_t nb = static_cast<size_t>(n) * 4;
      void *p = b.get(nb), *g = b.get(nb), *m = b.get(nb), *v = b.get(nb);
      t.push_back(
          {p, g, m, v, p, m, v, nullptr, n, kF32c, kF32c, kF32c, kF32c, kF32c, kF32c, kF32c, 0});
      items.push_back({g, n, kF32c});
      bytes += 7.0 * static_cast<double>(nb);
      gbytes += static_cast<double>(nb);
    }
    const launch::AdamScalars sc{0.9999f, 0.1f, 0.95f, 0.05f, -1e-4f, 0.2f, 1e-8f};
    bench.run("adamw fused fp32, 147 tensors (1B model)", bytes,
              [&] { launch::adamw(sc, t.data(), static_cast<int>(t.size()), s); });
    std::vector<launch::ClipTensor> clip;
    for (const launch::AdamTensor& a : t)
      clip.push_back({a.g, const_cast<void*>(a.g), a.n, kF32c, kF32c});
    void* total = b.get(4);
    bench.run("clip scale in place fp32, 147 tensors", 2.0 * gbytes, [&] {
      launch::clip_scale(total, kF32c, 1.0f, clip.data(), static_cast<int>(clip.size()), s);
    });
    const int64_t chunk = 65536;
    int64_t max_chunks = 0;
    for (int64_t n : sizes) max_chunks = std::max(max_chunks, (n + chunk - 1) / chunk);
    auto* partials = static_cast<float*>(b.get(static_cast<size_t>(max_chunks) * sizes.size() * 4));
    void* out = b.get(sizes.size() * 4);
    bench.run("grad norm (chunked squares), 147 tensors", gbytes, [&] {
      launch::chunked_squared_norms(items.data(), static_cast<int>(items.size()), chunk, partials,
                                    max_chunks, out, kF32c, s);
    });
  }
  ok(cudaStreamDestroy(s), "stream destroy");
  return 0;
}
