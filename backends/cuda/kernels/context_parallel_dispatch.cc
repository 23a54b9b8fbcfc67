// launch_context_parallel: context parallelism's kinds on the CUDA backend
// (docs/context-parallel.md). The plan decodes the op with core's argument structs
// (context_parallel_plan.h); then one launcher of context_parallel.cu. Everything is checked
// before anything is enqueued.
#include "backends/cuda/kernels/context_parallel_launch.h"
#include "backends/cuda/kernels/context_parallel_plan.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"

namespace fullshard::cuda {

void launch_context_parallel(const OpCall& op, const std::vector<void*>& in,
                             const std::vector<void*>& out, const KernelContext& ctx) {
  const cudaStream_t s = ctx.stream;
  auto dt_in = [&](size_t i) { return plan::dcode(op.inputs[i].meta.dtype); };
  auto dt_out = [&](size_t i) { return plan::dcode(op.outputs[i].meta.dtype); };
  switch (op.kind) {
    case OpKind::kSdpaMerge: {
      const SdpaMergePlan p = plan::plan_sdpa_merge(op);
      // A block's threads read lse while one of them writes lse': no aliasing (the model's
      // merged out and lse are new tensors: NOTE [Ring attention op sequence]).
      FULLSHARD_CHECK(out[0] != in[0] && out[1] != in[1],
                      plan::where(op) + "out' and lse' must not alias out and lse");
      return launch::sdpa_merge(p, static_cast<const float*>(in[0]),
                                static_cast<const float*>(in[1]), in[2],
                                static_cast<const float*>(in[3]), static_cast<float*>(out[0]),
                                static_cast<float*>(out[1]), s);
    }
    case OpKind::kSeqRowsAdd: {
      const plan::SeqRowsPlan p = plan::plan_seq_rows_add(op);
      FULLSHARD_CHECK(in[0] == out[0], plan::where(op) + "dst must be updated in place");
      return launch::seq_rows_add(p, out[0], in[1], s);
    }
    case OpKind::kAttention: {
      const RingAttnLayout l = plan::plan_ring_attention(op);
      return launch::ring_attention_forward(l, in[0], in[1], in[2], dt_in(0), out[0], dt_out(0),
                                            static_cast<float*>(out[1]), s);
    }
    case OpKind::kAttentionBackward: {
      const RingAttnLayout l = plan::plan_ring_attention_backward(op);
      const launch::RingGrads g{
          out[0], out[1], out[2], dt_out(0), dt_out(1), dt_out(2), static_cast<float*>(out[3])};
      return launch::ring_attention_backward(l, in[0], dt_in(0), in[1], in[2], in[3], dt_in(1),
                                             in[4], dt_in(4), static_cast<const float*>(in[5]), g,
                                             s);
    }
    default: break;
  }
  FULLSHARD_CHECK(false, plan::where(op) + "is not a context-parallel kind");
}

}  // namespace fullshard::cuda
