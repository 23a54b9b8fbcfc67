// kInitParam on the device: every element from its global index (NOTE [Bit-identical init on
// host and device]). The generator's floating steps are __d*_rn intrinsics, never contracted;
// this file is also compiled with --fmad=false (CMakeLists.txt) so nothing else is either.
#include "backends/cuda/kernels/init_param.h"

#include <algorithm>

#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"

namespace fullshard::cuda {
namespace {

static_assert(static_cast<int>(DType::kFloat32) == kF32 &&
              static_cast<int>(DType::kBFloat16) == kBF16 &&
              static_cast<int>(DType::kFloat16) == kF16);

// Local elements 2t and 2t+1 per thread: one Box-Muller pair when they are the two halves of
// the same pair of the full tensor (the usual case), else each on its own.
__global__ void init_param_kernel(init_gen::InitSpec s, int dt, void* out) {
  const int64_t real = s.real();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; 2 * t < s.numel;
       t += stride) {
    const int64_t i = 2 * t;
    float v0 = 0.0f, v1 = 0.0f;
    if (i < real) {
      const int64_t r = i / s.row_numel, c = i % s.row_numel;
      const uint64_t g = s.global_index(r, c);
      if (s.kind == init_gen::kNormal && (g & 1) == 0 && i + 1 < real && c + 1 < s.row_numel) {
        const init_gen::NormalPair p = init_gen::normal_pair(s.stream, g >> 1);
        v0 = init_gen::scaled(s.std, p.even);
        v1 = init_gen::scaled(s.std, p.odd);
      } else {
        v0 = init_gen::element(s.kind, s.std, s.stream, g);
        if (i + 1 < real) {
          const int64_t r1 = (i + 1) / s.row_numel, c1 = (i + 1) % s.row_numel;
          v1 = init_gen::element(s.kind, s.std, s.stream, s.global_index(r1, c1));
        }
      }
    }
    dev::store_f(out, dt, i, v0);
    if (i + 1 < s.numel) dev::store_f(out, dt, i + 1, v1);
  }
}

}  // namespace

void launch::init_param(const init_gen::InitSpec& spec, DType dt, void* out, cudaStream_t s) {
  if (spec.numel <= 0) return;
  constexpr int kThreads = 256;
  const int64_t threads_needed = (spec.numel + 1) / 2;
  const int64_t blocks =
      std::min<int64_t>((threads_needed + kThreads - 1) / kThreads, int64_t{1} << 16);
  init_param_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(spec, static_cast<int>(dt),
                                                                       out);
  launch::check_launch("init_param");
}

}  // namespace fullshard::cuda
