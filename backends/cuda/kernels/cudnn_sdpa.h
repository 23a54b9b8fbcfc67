// cuDNN's fused attention for `attention = cudnn` (NOTE [cuDNN attention on the CUDA backend],
// cudnn_sdpa.cc). The graph layout is a pure function, tested without a GPU; forward / backward
// run cuDNN where fullshard was built with it and decline (return false) where it cannot run a
// call within the memory the model gave it (NOTE [cuDNN plan choice], cudnn_sdpa_choice.h), so
// the caller runs the flash kernels instead.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/kernels/index_math.h"
#include "core/tensor/dtype.h"

namespace fullshard::cuda::cudnn_sdpa {

// One tensor of cuDNN's SDPA graph: dims [B, heads, S, D] and their strides in elements, and the
// element offset of its first element from the base pointer the op passes (packed qkv).
struct TensorLayout {
  std::array<int64_t, 4> dim{}, stride{};
  int64_t offset = 0;
};
// q, k, v, o (dO, dq share o's layout except for dq's head count: q's dims, o's strides), dk / dv
// (contiguous [B, S, Hkv, hd]), stats [B, H, S, 1] fp32 with rows lse_ld apart.
struct GraphLayout {
  TensorLayout q, k, v, o, dq, dkv, stats;
};
GraphLayout graph_layout(const AttnLayout& l);

// FULLSHARD_CUDNN_ATTENTION: unset / "auto" runs cuDNN where built with it, "off" never.
bool enabled_by_env(const char* value);
bool built_with_cudnn();
// The frontend's host-side check of the graph a call would build (dims, strides, attributes) for
// a device of this compute capability (90: sm_90), without a GPU: empty when it passes.
std::string validate_graph(bool backward, DType dt, const AttnLayout& l, int sm_version);

// Why cuDNN will not run this call, before asking cuDNN: empty when it may (dtypes all bf16 or
// all fp16, head dim a multiple of 8 up to 256, 16-byte aligned bases).
std::string precheck(const AttnLayout& l, std::initializer_list<DType> dtypes,
                     std::initializer_list<const void*> bases);

struct ForwardArgs {
  const void *q, *k, *v;
  void* o;
  float* stats;
};
struct BackwardArgs {
  const void *dout, *q, *k, *v, *o;
  const float* stats;
  void *dq, *dk, *dv;
  void* workspace;  // the model's temporary (NOTE [cuDNN SDPA workspace]): the plan runs in it
  size_t workspace_bytes;  // its bytes: the plan chosen asks at most these
};
// true: cuDNN's kernels were enqueued on s. false: not run (a one-line reason went to stderr the
// first time for this shape, and the call is counted with it); the caller runs the flash
// kernels, which write the same outputs. FULLSHARD_CUDNN_ATTENTION=off declines quietly.
// dtypes: every operand's, q's first (cuDNN takes one io dtype for all of them).
bool forward(const AttnLayout& l, std::initializer_list<DType> dtypes, const ForwardArgs& a,
             cudaStream_t s);
bool backward(const AttnLayout& l, std::initializer_list<DType> dtypes, const BackwardArgs& a,
              cudaStream_t s);

// Process-wide tallies, for tests and reports.
struct Counters {
  int64_t forward = 0, backward = 0, declined = 0;
};
Counters counters();
// The same calls by path (NOTE [Attention path counter]): "cudnn forward", "cudnn backward", or
// "flash DIRECTION: SHAPE: REASON" for each reason cuDNN declined; sorted by path.
std::vector<std::pair<std::string, int64_t>> path_counts();
// This thread's built graphs, one line each: direction, shape, the model's workspace, then the
// engine, its workspace and the plans skipped before it, or why cuDNN cannot run it (for tests
// and gpu-check logs).
std::vector<std::string> plans();

}  // namespace fullshard::cuda::cudnn_sdpa
