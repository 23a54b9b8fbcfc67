#pragma once
// The workspace cuDNN's fused attention (`attention = cudnn`) takes from the caching allocator
// per call, as the model declares it (NOTE [cuDNN SDPA workspace] in cudnn_sdpa_workspace.cc).
// One formula for the model's temporary (core/model/attention_variants.cc), the CPU reference's
// arity checks, and the CUDA backend's choice of a cuDNN plan (cudnn_sdpa_choice.h).
#include <cstdint>

namespace fullshard {

struct CudnnSdpaWorkspace {
  int64_t frontend = 0;  // cudnn-frontend's node tensors (dQ_accum, softmax_sum): from its source
  int64_t engine = 0;    // the execution plan's own: fitted to a measurement
  int64_t total() const { return frontend + engine; }  // mha_graph->get_workspace_size()
};

// The workspace of one call of the graph PyTorch's MHA.cpp builds (causal, no bias, no dropout,
// dense [B, S, heads, hd] tensors), for `heads` query heads; the kv head count does not enter.
// Every dimension must be positive (an internal check).
CudnnSdpaWorkspace cudnn_sdpa_workspace(bool backward, int64_t batch, int64_t seq, int64_t heads,
                                        int64_t head_dim);

}  // namespace fullshard
