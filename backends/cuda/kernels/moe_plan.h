#pragma once
// Host-side planning of the mixture-of-experts kinds on the CUDA backend (docs/moe.md): plain
// C++, tested without a GPU (tests/gpu/cuda_moe_plan_test.cc). The kernels are moe_router.cu,
// moe_reorder.cu and moe_grouped_mm.cu; moe_dispatch.cc calls them.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cuda/kernels/index_math.h"
#include "core/runtime/op.h"

namespace fullshard::cuda {

// NOTE [MoE kernels on the GPU]: each kind computes what the CPU kernel computes
// (backends/cpu/kernels/moe_*.cc), with the op's arguments decoded once by core
// (core/runtime/moe_args.h: RouterArgs, RowIndexArgs, PermuteIndicesArgs, GroupedMmArgs); the
// plan adds only what a device kernel needs (floating operands where it loads floats, a
// shared-memory bound, the widest access that fits the rows and bases).
// - Bits: the router's kernels run the CPU's arithmetic one token row per thread in its order
//   (fp32 maths, double sums, no FMA contraction: CMakeLists.txt), so top-k (and its order:
//   NaN first, ties to the lower expert), route norm, the histogram, the weighted sum and every
//   backward without exp give the CPU's bits; softmax and sigmoid call CUDA's expf, within
//   2 ulp of glibc's, so they agree within a few fp32 ulp. Argsort, floor divide, gather,
//   scatter (NOTE [Scatter rows without scratch] in moe_reorder.cu), the zero row and the
//   permutation are exact.
// - Index-add adds with atomics (fp32, or bf16 / fp16 atomics into a 16-bit output): the sum's
//   order, and so its last bits, vary from run to run; a 16-bit output rounds at every add where
//   the CPU rounds once. Tested within a stated tolerance.
// - Data the CPU checks and a kernel cannot (an index out of range, decreasing group offsets,
//   fractional counts) is skipped or clamped on the device, never read or written out of bounds.
// NOTE [Grouped GEMM on the GPU]: torch._grouped_mm's group ends `offs` are a device tensor
// (kPermuteIndices writes them), so a GEMM per group through cuBLAS / cuBLASLt, or cuBLAS's
// cublasGemmGroupedBatchedEx (host arrays of m, n, k), would need each group's rows on the host:
// a device-to-host copy and a stream synchronisation before every grouped GEMM of every MoE
// layer and pass. launch_kernel never synchronises (cuda_kernels.h), nor does PyTorch (its
// CUTLASS grouped GEMM reads offs on the device). So moe_grouped_mm.cu reads offs on the device:
// tiled fp32 SIMT GEMMs over grids sized for any offsets (NOTE [Grouped GEMM tiles] in
// moe_index.h), operands converted to fp32, sums in k order (deterministic), each output rounded
// once, as the CPU kernel's contract. Not tensor-core: correct first, fast later (docs/cuda-kernels.md).
struct MoePlan {
  int64_t tokens = 0, experts = 0, top_k = 0, dim = 0;  // router ops (dim: weighted sum's D)
  int64_t capacity = 0;                                  // kExpertCapacity
  int policy = 0;
  int64_t rows = 0, width = 0, divisor = 1, entries = 0;  // row-index ops (entries: index numel)
  int64_t row_bytes = 0, out_rows = 0;  // out_rows: kPadRow's output rows
  int unit = 1;          // bytes per access of the row copies (16, 8, 4, 2 or 1)
  bool slots = false;    // scatter: NOTE [Scatter rows without scratch]
  int64_t align = 1, padded_rows = 0, n_counts = 0;  // kPermuteIndices
  int64_t k = 0, n = 0;                              // grouped GEMMs (rows, experts above)
  size_t smem = 0;                                   // dynamic shared memory
  int d_in[3] = {kF32, kF32, kF32}, d_out[2] = {kF32, kF32};
};

// Largest shared memory a MoE kernel asks for without an opt-in (the default 48 KiB).
constexpr size_t kMoeMaxSmem = 48 * 1024;

// The widest access (16, 8, 4, 2, 1 bytes) dividing row_bytes and both addresses.
int moe_copy_unit(int64_t row_bytes, const void* src, const void* dst);

// Throws InternalError naming the op where a kernel cannot run it (a non-floating operand it
// loads as floats, more experts or counts than its shared memory holds).
MoePlan plan_moe(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out);

}  // namespace fullshard::cuda
