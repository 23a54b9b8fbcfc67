#pragma once
// What the CPU's matmuls can do here and now: a short timed loop of OpenBLAS sgemm, called as
// the linear kernels call it, so a measured MFU can say how far the run is from the machine's
// real matmul rate, not only from a nominal peak (NOTE [Measured MFU] in
// tools/fullshard/train_commands.cc).
#include <cstdint>
#include <string>

namespace fullshard::cpu {

struct SgemmProbe {
  double flops_per_s = 0;
  std::string source;  // what was timed, e.g. "OpenBLAS sgemm 512x512x512, 1 thread, 0.20 s"
};

// Times C = A B for n x n fp32 matrices, after one warm-up call, until `seconds` have passed
// (at least 3 calls); 2 n^3 FLOPs per call.
SgemmProbe probe_sgemm(double seconds = 0.2, int64_t n = 512);

}  // namespace fullshard::cpu
