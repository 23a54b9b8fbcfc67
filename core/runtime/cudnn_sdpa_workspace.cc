#include "core/runtime/cudnn_sdpa_workspace.h"

#include "core/common/error.h"

// NOTE [cuDNN SDPA workspace]: PyTorch's MHA.cpp runs the heuristics' first plan that builds and
// allocates mha_graph->get_workspace_size() bytes from the caching allocator per call (none when
// 0): the execution plan's (engine) workspace plus the frontend's node workspace (cudnn-frontend
// 1.32.0, tools/deps.sh). For the graph PyTorch builds (causal, no bias / dropout / padding mask /
// alibi, dense):
// - frontend part, forward: 0 bytes; backward: dQ_accum [B, H, S, hd] and softmax_sum [B, H, S, 1]
//   fp32, B*H*S*(hd+1)*4 bytes, plus B*8 where S % 128 != 0 (cuDNN <= 9.15's padding-mask
//   workaround; a newer cuDNN asks less, which fits: NOTE [cuDNN plan choice]);
// - engine part, backward: B*H*round_up(S, 128)*hd*4 + 256, fitted to the one measurement
//   (67,109,120 bytes on an H200 at B 2, H 32/8, S 4096, hd 64); other shapes and fp16 are
//   assumptions that err on the large side, and the backend declines and counts any plan asking
//   more. Forward: 0 (the measured plan had none).
// The frontend's source lines and the measurement in full: docs/cuda-backend.md, "cuDNN SDPA
// workspace in full".
namespace fullshard {

CudnnSdpaWorkspace cudnn_sdpa_workspace(bool backward, int64_t batch, int64_t seq, int64_t heads,
                                        int64_t head_dim) {
  FULLSHARD_CHECK(batch > 0 && seq > 0 && heads > 0 && head_dim > 0,
                  "cuDNN SDPA workspace of an empty shape");
  CudnnSdpaWorkspace w;
  if (!backward) return w;
  const int64_t rows = batch * heads * seq;  // [B, H, S]
  w.frontend =
      rows * (head_dim + 1) * 4 + (seq % 128 != 0 ? batch * 8 : 0);  // dQ_accum, softmax_sum
  w.engine = batch * heads * ((seq + 127) / 128 * 128) * head_dim * 4 + 256;  // the measured plan 0
  return w;
}

}  // namespace fullshard
