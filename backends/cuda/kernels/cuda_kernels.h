#pragma once
// CUDA implementations of the OpKinds the host program launches (core/runtime/op.h), with the
// contracts of the CPU reference kernels (docs/kernels.md; algorithms and tolerances in
// docs/cuda-kernels.md). Plain C++: includable from .cc files.
#include <cstddef>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "core/runtime/op.h"

namespace fullshard::cuda {

struct KernelContext {
  cudaStream_t stream = nullptr;   // the stream the op runs on
  cublasLtHandle_t lt = nullptr;   // created once per backend
  void* gemm_workspace = nullptr;  // cuBLASLt workspace (may be null with 0 bytes)
  size_t gemm_workspace_bytes = 0;
  // The float8 GEMMs' staging (kScaledMM*: at least plan::plan_scaled_gemm(op).scratch_bytes,
  // 256-byte aligned): device memory outside the caching allocator, NOTE [Float8 GEMM staging]
  // in backends/cuda/float8_staging.h. Null with 0 bytes for every other kind.
  void* float8_staging = nullptr;
  size_t float8_staging_bytes = 0;
};

// in[i] / out[i]: device addresses of op.inputs[i] / op.outputs[i] (buffer base + offset).
// Enqueues on ctx.stream, never synchronizes and never allocates device memory (every byte
// comes from the caller: NOTE [No kernel allocations] in dispatch.cc). Throws InternalError
// (naming the op) on a bad layout, before anything is enqueued.
void launch_kernel(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out,
                   const KernelContext& ctx);

// Every kind except kLoadBatch and kInitParam (the backend's own: init_param.h), async TP's
// kAllGatherMatmul / kMatmulReduceScatter (simulator only; every real backend refuses them).
bool has_kernel(OpKind kind);

// torchao's float8 kinds (float8_dispatch.cc): the casts (float8.cu) and the scaled matmuls
// (scaled_gemm.h, in ctx.float8_staging).
void launch_float8(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out,
                   const KernelContext& ctx);

// The mixture-of-experts kinds (moe_dispatch.cc; NOTE [MoE kernels on the GPU] in moe_plan.h):
// the router, token reordering and the grouped GEMMs (moe_*.cu).
void launch_moe(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out,
                const KernelContext& ctx);

// Context parallelism (context_parallel_dispatch.cc; NOTE [Ring attention on the CUDA backend] in
// context_parallel_plan.h): kSdpaMerge, kSeqRowsAdd and the ring rounds of kAttention /
// kAttentionBackward (plan::is_ring_attention).
void launch_context_parallel(const OpCall& op, const std::vector<void*>& in,
                             const std::vector<void*>& out, const KernelContext& ctx);

}  // namespace fullshard::cuda
