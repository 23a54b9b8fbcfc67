#pragma once
// What the host program asks a backend to run: kernels (OpCall) and collectives
// (CollectiveCall). The simulator records them with their cost; real backends execute them.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor/shape.h"

namespace fullshard {

// A view of a buffer: `meta` elements starting `offset_bytes` into buffer `buffer_id`.
struct TensorRef {
  uint64_t buffer_id = 0;
  uint64_t offset_bytes = 0;
  TensorMeta meta;
  uint64_t nbytes() const { return meta.nbytes(); }
};

// Kernel kinds. Forward and backward are separate kinds so real backends dispatch directly.
enum class OpKind : uint16_t {
  kFill,       // out = fargs[0] if given, else 0 (new_zeros)
  kInitParam,  // a parameter's padded shard: NOTE [Sharding-independent init] in
               // core/model/module.h; iargs: row_offset, local_rows, row_numel, init
               // (ParamInit), key (bit cast); fargs: std. Padding rows are 0.
               // 7 iargs: + column offset, full row (tp Shard(1)); 8: + block rows,
               // tp index, tp degree (tp Shard(0) of stacked blocks, core/data/param_init.cc)
  kCopy,       // out = in, with dtype cast when dtypes differ; with several inputs and
               // iargs[0] = rows: out row i = concat of every input's row i (torch.cat dim -1)
  kAdd,        // out = a + b (in place when out aliases a)
  kScale,      // out = in * fargs[0]
  kEmbedding,
  kEmbeddingBackward,
  kRMSNorm,
  kRMSNormBackward,
  kLayerNorm,
  kLayerNormBackward,
  kLinear,
  kLinearBackwardInput,
  kLinearBackwardWeight,
  kLinearBackwardBias,
  kRoPE,
  kRoPEBackward,
  kAttention,
  kAttentionBackward,  // flash-style causal attention with GQA
  kSiLU,
  kSiLUBackward,
  kMul,
  kMulBackward,  // elementwise a * b
  kGELU,
  kGELUBackward,  // tanh approximation
  kPositionEmbedding,
  kPositionEmbeddingBackward,  // x + wpe[p0:p0+S]; iargs: p0 (absent: 0)
  kLogSoftmax,
  kLogSoftmaxBackward,
  kNllLoss,
  kNllLossBackward,
  kAllGatherCopyIn,   // foreach copy of sharded params (with cast) into the AG input slice
  kAllGatherCopyOut,  // split_with_sizes_copy of the AG output into per-param buffers
  kChunkCat,          // RS copy-in: pad + interleave grads into the RS input (with cast)
  kLoadBatch,         // fill tokens / labels of a micro-batch; iargs: step, micro-batch
  kSquaredNorm,       // out[i] = sum(inputs[i]^2) in fp32 (grad clipping, _foreach_norm)
  kSum,               // out[0] = sum(in) (fp32)
  kClipGradScale,     // inputs[0]: total squared norm; scales inputs[1..] in place by
                      // min(1, fargs[0] / (sqrt(total) + 1e-6))
  kAdamW,             // in-place AdamW on (param, grad, exp_avg, exp_avg_sq)
  // Eager decompositions (model.implementation, docs/ops.md): one kernel per aten op.
  kPowScalar,     // out = in ^ fargs[0] (aten.pow.Tensor_Scalar)
  kAddScalar,     // out = in + fargs[0] (aten.add.Scalar)
  kRsqrt,         // out = 1 / sqrt(in)
  kMulBroadcast,  // out[r, d] = a[r, d] * b[r] (iargs[0] = 0) or b[d] (iargs[0] = 1); iargs[1] = D
  kSumLastDim,    // out[r] = fargs[0] * sum_d in[r, d] (mean / sum_to_size [rows, 1]); iargs[0] = D
  kSumLeadingDims,  // out[d] = sum_r in[r, d] (sum_to_size [D]); iargs[0] = D
  kExpandLastDim,   // out[r, d] = in[r] * fargs[0] (mean backward: expand / D); iargs[0] = D
  kRoPEComplex,     // view_as_complex(x) * freqs_cis: ADJACENT pairs (2i, 2i+1); as kRoPE otherwise
  kRoPEComplexBackward,  // grad * freqs_cis.conj()
  kRepeatKV,             // [R, Hkv, hd] -> [R, Hkv * n_rep, hd] (head j of kv head j / n_rep);
                         // iargs: kv_heads, n_rep, head_dim
  kRepeatKVBackward,     // sum over the n_rep copies: [R, Hkv * n_rep, hd] -> [R, Hkv, hd]
  kRotaryCosSin,         // HF LlamaRotaryEmbedding: out0 = cos, out1 = sin [B, S, hd] of
                  // pos * theta^(-2 (i % (hd/2)) / hd) (emb = cat(freqs, freqs)); iargs[0] = hd
  kNarrowCopy,     // per block: out[b * ow + oo + i] = fargs[0] * in[b * iw + io + i], i < n;
                   // iargs: n, iw, io, ow, oo (rotate_half's -x2, its slice / neg backwards)
  kRotateHalfCat,  // torch.cat((neg, x1), -1) per head: in0 = -x2 [.., hd/2], in1 = x [.., hd];
                   // out[.., :hd/2] = in0, out[.., hd/2:] = x[.., :hd/2]; iargs[0] = hd
  // SDPA's other CUDA backends (model.implementation attention, core/model/attention_variants.h):
  // kAttention's maths; iargs {B, S, H, Hkv, hd, packed, lse_len}, the logsumexp rows lse_len
  // long (>= S; efficient pads them to a multiple of 32). Backward outputs dq, dk, dv, then
  // the backend's scratch.
  kAttentionEfficient,
  kAttentionEfficientBackward,  // SDPBackend.EFFICIENT_ATTENTION (no GQA)
  kAttentionCudnn,
  kAttentionCudnnBackward,  // SDPBackend.CUDNN_ATTENTION
  // Tensor parallelism (core/model/tensor_parallel.h):
  kTransposeBlocks,  // out[j][i][:] = in[i][j][:], in viewed as [a][b][inner]; iargs: a, b, inner
                     // (torch.cat(torch.chunk(..)) around a tp all-gather / reduce-scatter)
  // Loss parallel (core/model/loss_parallel.cc): rows of D = iargs[0] elements; fp32 math.
  kRowMax,                    // out[r] = max_d in[r, d] (amax(-1))
  kSubRow,                    // out[r, d] = a[r, d] - b[r]
  kExp,                       // out = exp(in)
  kLog,                       // out = log(in)
  kNllVocabParallel,          // out[r] = -lp[r, t_r - start] when start <= t_r < start + D, else 0;
                              // inputs (lp [R, D], targets int64 [R]); iargs: D, start
  kNllVocabParallelBackward,  // out[r, d] = g * fargs[0] * (exp(lp[r, d]) - [d == t_r - start]);
                              // inputs (g scalar, lp, targets); iargs: D, start
  // torch.compile of a Llama block (model.implementation compile, core/model/compiled_block.h):
  // inductor's fused pointwise regions, one kernel each, fp32 math on the stored dtype.
  kCompiledRMSNorm,          // (x, w) -> (y, rstd fp32 [rows]); fargs[0] = eps
  kCompiledAddRMSNorm,       // (x, a, w) -> (y, rstd): RMSNorm of h = x + a (h stays in registers)
  kCompiledRMSNormBackward,  // (g_y, x, rstd, w [, a] [, g_h]) -> (g_x, g_w): the norm's input
                             // gradient (+ g_h); iargs {has_a, has_g_h}; with a, x + a recomputed
  kCompiledRoPE,             // (q, k) -> (q, k), in place: both rotations in one kernel;
                             // iargs {head_dim, adjacent pairs}; fargs RopeParams::fargs()
  kCompiledRoPEBackward,     // (g) -> (g_x): the inverse rotation; iargs, fargs as kCompiledRoPE
  kCompiledSiluMul,          // (a, b) -> silu(a) * b
  kCompiledSiluMulBackward,  // (g, a, b) -> (g_a, g_b); silu(a) recomputed
  kCompiledResidualAdd,      // (x, a, f) -> x + a + f (out may alias f)
  // Asynchronous tensor parallelism (tensor_parallel.async, core/model/async_tp.h): PyTorch's
  // symmetric-memory collective-matmuls, simulated only (real backends refuse them).
  // iargs {M / tp, K, N, tp}: the product's rows per chunk, its K, its N (summed over the
  // weights of one all-gather), the tp group's size.
  kAllGatherMatmul,      // symm_mem.fused_all_gather_matmul: in (A shard [M/tp, K], B...); out (A
                         // gathered [M, K], C... [M, N_i])
  kMatmulReduceScatter,  // symm_mem.fused_matmul_reduce_scatter: in (A [M, K], B); out (the
                         // stacked partials [M, N], then this rank's sum [M/tp, N])
};
// The kinds a torch.compile'd region launches (inductor's generated kernels): no eager dispatch.
bool is_compiled_region(OpKind k);
// The kinds PyTorch runs as cuBLAS matmuls (aten::mm / addmm, and the ones symm_mem's fused
// all-gather / reduce-scatter matmuls issue): each uses its thread's cuBLAS workspace.
bool op_uses_blas(OpKind k);
const char* op_kind_name(OpKind k);

struct OpCall {
  OpKind kind = OpKind::kFill;
  std::string name;                // module path + op, e.g. "layers.3.attention.wq"
  std::vector<TensorRef> inputs;   // read
  std::vector<TensorRef> outputs;  // written (an in-place op lists its tensor in both)
  std::vector<int64_t> iargs;      // op-specific integer attributes
  std::vector<double> fargs;       // op-specific float attributes
  double flops = 0;                // floating-point operations (2 per multiply-add)
  double bytes = 0;                // bytes read + written in device memory
};

enum class CollectiveKind : uint8_t {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kBarrier
};
const char* collective_name(CollectiveKind k);

// c10d ReduceOp subset FSDP2 uses. kPremulSum multiplies by `scale` before summing.
enum class ReduceOp : uint8_t { kSum, kAvg, kPremulSum, kMax };
const char* reduce_op_name(ReduceOp op);

struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kAllGather;
  ReduceOp op = ReduceOp::kSum;
  double scale = 1.0;  // kPremulSum factor
  std::string name;    // e.g. "layers.3 all_gather"
  // all_gather: input is this rank's slice, output the whole (W x input) buffer.
  // reduce_scatter: input is the whole buffer, output this rank's slice.
  // all_reduce / broadcast: input == output.
  TensorRef input;
  TensorRef output;
  int root = 0;  // broadcast
};

}  // namespace fullshard
