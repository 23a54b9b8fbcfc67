// launch_kernel / has_kernel: operand checks (plan.h), then one launcher per OpKind.
//
// NOTE [No kernel allocations]: the simulator predicts device memory to the byte from the
// tensors the host program allocates, so no kernel here allocates: every scratch byte is an
// operand. The two places that need more than their outputs use memory the op already has: the
// attention backward's flash temporaries (softmax_d; NOTE [Flash attention backward
// temporaries] in core/model/ops.cc) and the norm backward's gradient output as room for
// row-chunk partial sums before writing it (NOTE [Column sums without scratch] in norm_rows.cuh).
#include <array>
#include <atomic>
#include <cmath>
#include <initializer_list>
#include <string>

#include "backends/common/kernel_families.h"
#include "backends/cuda/kernels/attention_fa2_plan.h"
#include "backends/cuda/kernels/compiled_launchers.h"
#include "backends/cuda/kernels/context_parallel_plan.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/kernels/cudnn_sdpa.h"
#include "backends/cuda/kernels/eager_launchers.h"
#include "backends/cuda/kernels/gemm.h"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/plan.h"
#include "backends/cuda/kernels/tensor_parallel.h"
#include "core/common/error.h"
#include "core/optim/foreach_norm.h"
#include "core/runtime/adamw_args.h"
#include "core/runtime/copy_args.h"
#include "core/runtime/eager_args.h"
#include "core/runtime/layer_args.h"
#include "core/runtime/norm_args.h"
#include "core/runtime/op_args.h"
#include "core/runtime/op_table.h"
#include "core/runtime/rope_args.h"

namespace fullshard::cuda {

namespace launch {
void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  FULLSHARD_CHECK(e == cudaSuccess, std::string("CUDA kernel launch '") + what +
                                        "' failed: " + cudaGetErrorString(e));
}
}  // namespace launch

namespace {

using namespace plan;
using Ptrs = std::vector<void*>;

int dt_in(const OpCall& op, size_t i) { return dcode(op.inputs[i].meta.dtype); }
int dt_out(const OpCall& op, size_t i) { return dcode(op.outputs[i].meta.dtype); }
void expect_float(const OpCall& op, const TensorMeta& m, const char* what) {
  FULLSHARD_CHECK(is_float(m.dtype), where(op) + what + " must be fp32, bf16 or fp16, got " +
                                         std::string(dtype_name(m.dtype)));
}
void expect_same_numel(const OpCall& op) {
  const int64_t n = op.outputs.empty() ? op.inputs[0].meta.numel() : op.outputs[0].meta.numel();
  for (const auto& r : op.inputs) {
    FULLSHARD_CHECK(r.meta.numel() == n, where(op) +
                                             "operand sizes differ: " + shape_str(r.meta.shape) +
                                             " vs " + std::to_string(n) + " elements");
    expect_float(op, r.meta, "operand");
  }
  for (const auto& r : op.outputs) {
    FULLSHARD_CHECK(r.meta.numel() == n, where(op) + "output sizes differ");
    expect_float(op, r.meta, "output");
  }
}

void run_copies(const OpCall& op, const std::vector<CopyJob>& jobs, const Ptrs& in, const Ptrs& out,
                cudaStream_t s) {
  for (const CopyJob& j : jobs) {
    const DType sd = op.inputs[j.in].meta.dtype, dd = op.outputs[j.out].meta.dtype;
    if (sd == dd) {
      const int64_t es = static_cast<int64_t>(dtype_size(sd));
      const Copy2D b = to_bytes(j.c, es);
      launch::copy2d_bytes(b, in[j.in], out[j.out], copy_vector(b, in[j.in], 1, out[j.out], 1, 16),
                           s);
    } else {
      const int vec = copy_vector(j.c, in[j.in], static_cast<int64_t>(dtype_size(sd)), out[j.out],
                                  static_cast<int64_t>(dtype_size(dd)), 8) == 8
                          ? 8
                          : 1;
      // 8-element vectors are 16-byte accesses for 16-bit dtypes and 2 x 16 bytes for fp32:
      // both need 16-byte aligned elements, which copy_vector(…, 8) guarantees.
      launch::copy2d_cast(j.c, in[j.in], dcode(sd), out[j.out], dcode(dd), vec, s);
    }
  }
}

void unary(launch::Ew e, const OpCall& op, const Ptrs& in, const Ptrs& out, float f,
           cudaStream_t s) {
  expect_arity(op, 1, 1);
  expect_same_numel(op);
  launch::elementwise(e, in[0], dt_in(op, 0), nullptr, 0, out[0], dt_out(op, 0),
                      op.outputs[0].meta.numel(), f, s);
}
void binary(launch::Ew e, const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  expect_arity(op, 2, 1);
  expect_same_numel(op);
  launch::elementwise(e, in[0], dt_in(op, 0), in[1], dt_in(op, 1), out[0], dt_out(op, 0),
                      op.outputs[0].meta.numel(), 0.0f, s);
}

void fill(const OpCall& op, const Ptrs& out, cudaStream_t s) {
  const double v = FillArgs::decode(op).value;  // core/runtime/copy_args.h
  for (size_t k = 0; k < op.outputs.size(); ++k) {
    unsigned char pat[16];
    fill_pattern(op.outputs[k].meta.dtype, v, pat);
    launch::fill(out[k], static_cast<int64_t>(op.outputs[k].nbytes()), pat, s);
  }
}

void embedding(const OpCall& op, const Ptrs& in, const Ptrs& out, bool backward, cudaStream_t s) {
  // EmbeddingArgs (core/runtime/layer_args.h): vocab_start -1 tells the launchers "none".
  const EmbeddingArgs e = EmbeddingArgs::decode(op);
  const TensorMeta& w = backward ? op.outputs[0].meta : op.inputs[1].meta;
  const int64_t V = e.vocab, D = e.dim, n = e.tokens, vocab_start = e.vocab_start;
  if (!backward) {
    expect_float(op, w, "weight");
    expect_float(op, op.outputs[0].meta, "output");
    return launch::embedding(static_cast<const int64_t*>(in[0]), in[1], dt_in(op, 1), out[0],
                             dt_out(op, 0), n, V, D, vocab_start, s);
  }
  expect_float(op, op.inputs[0].meta, "grad_y");
  expect_float(op, w, "grad_weight");
  FULLSHARD_CHECK(embedding_backward_smem(D) <= kMaxDynamicSmem,
                  where(op) + "embedding dim " + std::to_string(D) +
                      " exceeds the backward's shared-memory row");
  launch::embedding_backward(in[0], dt_in(op, 0), static_cast<const int64_t*>(in[1]), out[0],
                             dt_out(op, 0), n, V, D, vocab_start, s);
}

void position_embedding(const OpCall& op, const Ptrs& in, const Ptrs& out, bool backward,
                        cudaStream_t s) {
  const PositionEmbeddingArgs pe = PositionEmbeddingArgs::decode(op);  // layer_args.h
  const TensorMeta& x = op.inputs[0].meta;
  const TensorMeta& w = backward ? op.outputs[0].meta : op.inputs[1].meta;
  const int64_t D = pe.dim, S = pe.seq, P = pe.positions, p0 = pe.first_position;
  expect_float(op, x, "x");
  expect_float(op, w, "wpe");
  if (!backward) {
    expect_float(op, op.outputs[0].meta, "output");
    return launch::position_embedding(in[0], dt_in(op, 0), in[1], dt_in(op, 1), out[0],
                                      dt_out(op, 0), S * D == 0 ? 0 : pe.rows, S, D, p0, s);
  }
  const int64_t batch = S * D == 0 ? 0 : x.numel() / (S * D);
  launch::position_embedding_backward(in[0], dt_in(op, 0), out[0], dt_out(op, 0), batch, S, P, D,
                                      p0, s);
}

// kRoPE (rotate_half pairs) and kRoPEComplex (adjacent pairs), forward (sign 1) and backward.
void rope(const OpCall& op, const Ptrs& in, const Ptrs& out, float sign, bool adjacent,
          cudaStream_t s) {
  const RopeArgs r = RopeArgs::decode(op);  // core/runtime/rope_args.h
  const TensorMeta &x = op.inputs[0].meta, &y = op.outputs[0].meta;
  const int64_t hd = r.head_dim;
  expect_float(op, x, "x");
  expect_float(op, y, "output");
  // NOTE [RoPE in fp32] (rope_args.h): the CPU kernel's fp32 angles from the host's rope_inv_freq
  // table (Llama 3.1 scaling included), rotated by the compiled RoPE's kernel on this one tensor.
  if (hd / 2 > launch::kMaxRopePairs)
    throw InputError("model",
                     "has head_dim " + std::to_string(hd) + ", above the " +
                         std::to_string(2 * launch::kMaxRopePairs) +
                         " that the CUDA RoPE kernel takes",
                     "train on the CPU backend (--backend cpu)");
  const std::vector<float> inv = rope_inv_freq(r.rope, hd);
  const launch::RopeTensor t[1] = {
      {in[0], out[0], dt_in(op, 0), dt_out(op, 0), r.rows, r.seq, r.width}};
  launch::compiled_rope(t, 1, hd, adjacent, sign, inv.data(), s);
}

void norm(const OpCall& op, const Ptrs& in, const Ptrs& out, bool layer, cudaStream_t s) {
  const NormArgs r = NormArgs::decode(op);  // core/runtime/norm_args.h
  expect_float_rows(op, op.inputs[0].meta, op.inputs[1].meta);
  expect_float(op, op.outputs[0].meta, "output");
  if (!layer)
    return launch::rms_norm(in[0], dt_in(op, 0), in[1], dt_in(op, 1), out[0], dt_out(op, 0),
                            static_cast<float*>(out[1]), r.rows, r.dim, r.eps, s);
  expect_float(op, op.inputs[2].meta, "bias");
  launch::layer_norm(in[0], dt_in(op, 0), in[1], dt_in(op, 1), in[2], dt_in(op, 2), out[0],
                     dt_out(op, 0), static_cast<float*>(out[1]), static_cast<float*>(out[2]),
                     r.rows, r.dim, r.eps, s);
}

void norm_backward(const OpCall& op, const Ptrs& in, const Ptrs& out, bool layer, cudaStream_t s) {
  // RMSNorm: (g, x, rstd, w) -> (gx, gw); LayerNorm: (g, x, mean, rstd, w) -> (gx, gw, gb).
  // The zero-bubble split (NOTE [Split backward] in core/model/autograd.h): (g, x, rstd, w) -> gx
  // and (g, x, rstd) -> gw, each the fused kernel's part for its output alone.
  const NormBackwardLayout r = decode_norm_backward(op);  // core/runtime/norm_args.h
  const bool input_only = op.kind == OpKind::kRMSNormBackwardInput,
             weight_only = op.kind == OpKind::kRMSNormBackwardWeight;
  const size_t wi = r.weight;
  const TensorMeta& g = op.inputs[0].meta;
  expect_float_rows(op, op.inputs[1].meta, weight_only ? op.outputs[0].meta : op.inputs[wi].meta);
  expect_float(op, g, "grad");
  for (const auto& o : op.outputs) expect_float(op, o.meta, "gradient output");
  void* gx = weight_only ? nullptr : out[0];
  void* gw = input_only ? nullptr : out[weight_only ? 0 : 1];
  const int dgx = weight_only ? 0 : dt_out(op, 0);
  const int dgw = input_only ? 0 : dt_out(op, weight_only ? 0 : 1);
  launch::norm_backward(
      in[0], dt_in(op, 0), in[1], dt_in(op, 1), layer ? static_cast<const float*>(in[2]) : nullptr,
      static_cast<const float*>(in[layer ? 3 : 2]), weight_only ? nullptr : in[wi],
      weight_only ? 0 : dt_in(op, wi), gx, dgx, gw, dgw, layer ? out[2] : nullptr,
      layer ? dt_out(op, 2) : 0, r.rows, r.dim, s);
}

void linear_bias_backward(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  const auto [M, N] = LinearBiasArgs::decode(op);  // core/runtime/layer_args.h
  expect_numel(op, op.inputs[0].meta, M * N, "grad_y");
  expect_numel(op, op.outputs[0].meta, N, "grad_b");
  expect_float(op, op.inputs[0].meta, "grad_y");
  expect_float(op, op.outputs[0].meta, "grad_b");
  launch::column_sum(in[0], dt_in(op, 0), out[0], dt_out(op, 0), M, N, s);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The tensor-core flash kernels stage token rows with 16-byte loads from these bases (the row
// strides and head offsets are multiples of 8 elements for head_dim 64 / 128); NOTE [Attention
// kernel override] can turn them off.
// The current device's opt-in shared memory per block, read once per device (0 when unknown).
int64_t smem_optin_bytes() {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int64_t>, kMaxDevices> cache{};  // bytes + 1; 0: not read yet
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    cudaGetLastError();
    return 0;
  }
  std::atomic<int64_t>& c = cache[static_cast<size_t>(dev)];
  if (c.load() == 0) {
    int bytes = 0;
    if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
        cudaSuccess) {
      cudaGetLastError();
      bytes = 0;
    }
    c.store(int64_t{bytes} + 1);
  }
  return c.load() - 1;
}

// NOTE [Attention kernel choice]: FlashAttention-2 (attention_fa2_*.cu) runs where the env
// override allows it (NOTE [Attention kernel override]), the shape and dtype fit
// (plan::attention_uses_fa2), every base is 16-byte aligned, the device grants its shared
// memory (25-93 KB per block) and, backward, the op carries the flash temporaries it writes
// (kAttentionBackward: dq_accum, and dk / dv expanded under GQA; the efficient and cuDNN kinds'
// scratch has other shapes). Else the WMMA tensor-core kernels under the same conditions at
// head_dim 64 / 128: at 128 they take 110-112 KB per block, which sm_80 / sm_90 allow (163 /
// 227 KB) but sm_86 / sm_89 (99 KB: RTX 30xx / 40xx, A10, A40, L4, L40) do not. Else SIMT.
launch::AttnKernel attention_kernel(const AttnPlan& p, DType dt,
                                    std::initializer_list<const void*> bases, bool backward,
                                    bool has_flash_temps) {
  const AttentionKernels env = attention_kernels_from_env();
  if (env == AttentionKernels::kSimt) return launch::AttnKernel::kSimt;
  for (const void* b : bases)
    if (!aligned16(b)) return launch::AttnKernel::kSimt;
  const int64_t optin = smem_optin_bytes();
  if (env == AttentionKernels::kAuto && attention_uses_fa2(p, dt) &&
      (!backward || has_flash_temps) &&
      static_cast<int64_t>(backward ? fa2::bwd_smem_bytes(p.l.hd) : fa2::fwd_smem_bytes(p.l.hd)) <=
          optin)
    return launch::AttnKernel::kFa2;
  if (!attention_uses_tensor_cores(p, dt)) return launch::AttnKernel::kSimt;
  const size_t need = backward ? launch::attention_backward_tc_smem(p.l.hd)
                               : launch::attention_forward_tc_smem(p.l.hd);
  return static_cast<int64_t>(need) <= optin ? launch::AttnKernel::kWmma
                                             : launch::AttnKernel::kSimt;
}

void attention(const OpCall& op, const Ptrs& in, const Ptrs& out, const KernelContext& ctx) {
  // A ring round (NOTE [Ring attention on the CUDA backend] in context_parallel_plan.h).
  if (is_ring_attention(op)) return launch_context_parallel(op, in, out, ctx);
  const cudaStream_t s = ctx.stream;
  const AttnPlan p = plan_attention(op);
  const void* q = in[0];
  const void* k = p.packed ? in[0] : in[1];
  const void* v = p.packed ? in[0] : in[2];
  const DType dt = op.inputs[0].meta.dtype;
  if (op.kind == OpKind::kAttentionCudnn &&  // NOTE [cuDNN attention on the CUDA backend]
      cudnn_sdpa::forward(p.l, {dt, op.outputs[0].meta.dtype},
                          {q, k, v, out[0], static_cast<float*>(out[1])}, s))
    return;
  const launch::AttnKernel kernel = attention_kernel(p, dt, {q, k, v}, false, false);
  launch::attention_forward(p.l, q, k, v, dcode(dt), out[0], dt_out(op, 0),
                            static_cast<float*>(out[1]), kernel, s);
}

void attention_backward(const OpCall& op, const Ptrs& in, const Ptrs& out,
                        const KernelContext& ctx) {
  if (is_ring_attention(op)) return launch_context_parallel(op, in, out, ctx);
  const cudaStream_t s = ctx.stream;
  const AttnPlan p = plan_attention_backward(op);
  const void* q = in[1];
  const void* k = p.packed ? in[1] : in[2];
  const void* v = p.packed ? in[1] : in[3];
  launch::AttnGrads g{out[0],
                      out[1],
                      out[2],
                      dt_out(op, 0),
                      dt_out(op, 1),
                      dt_out(op, 2),
                      static_cast<float*>(out[3]),
                      p.softmax_d_ld};
  const DType dt = op.inputs[1].meta.dtype;  // q's (k, v share it: plan_attention_backward)
  if (op.kind == OpKind::kAttentionCudnnBackward &&
      cudnn_sdpa::backward(
          p.l,
          {dt, op.inputs[0].meta.dtype, op.inputs[p.o_in].meta.dtype, op.outputs[0].meta.dtype,
           op.outputs[1].meta.dtype, op.outputs[2].meta.dtype},
          {in[0], q, k, v, in[p.o_in], static_cast<const float*>(in[p.lse_in]), out[0], out[1],
           out[2], out[3], op.outputs[3].meta.nbytes()},
          s))
    return;
  // plan_attention_backward checked their sizes (NOTE [Flash attention backward temporaries]).
  const bool flash_temps = op.kind == OpKind::kAttentionBackward;
  if (flash_temps) {
    g.dq_accum = static_cast<float*>(out[4]);
    g.dq_accum_rows = p.softmax_d_ld;  // round128(S)
    g.dq_accum_hd = round_up(p.l.hd, 32);
    if (p.l.H != p.l.Hkv) {
      g.dk_expanded = out[5];
      g.dv_expanded = out[6];
      g.dd_expanded = dt_out(op, 5);
    }
  }
  // The tensor-core backwards read dO as MMA operands in q's dtype.
  const launch::AttnKernel kernel =
      op.inputs[0].meta.dtype == dt
          ? attention_kernel(p, dt, {in[0], q, k, v, in[p.o_in]}, true, flash_temps)
          : launch::AttnKernel::kSimt;
  launch::attention_backward(p.l, in[0], dt_in(op, 0), q, k, v, dt_in(op, 1), in[p.o_in],
                             dt_in(op, p.o_in), static_cast<const float*>(in[p.lse_in]), g, kernel,
                             s);
}

void log_softmax(const OpCall& op, const Ptrs& in, const Ptrs& out, bool backward, cudaStream_t s) {
  expect_arity(op, backward ? 2 : 1, 1);
  const TensorMeta& ref = op.inputs[backward ? 1 : 0].meta;
  const int64_t V = ref.shape.empty() ? 1 : ref.shape.back();
  FULLSHARD_CHECK(V > 0, where(op) + "empty class dim");
  expect_same_numel(op);
  const int64_t rows = ref.numel() / V;
  if (!backward) return launch::log_softmax(in[0], dt_in(op, 0), out[0], dt_out(op, 0), rows, V, s);
  launch::log_softmax_backward(in[0], dt_in(op, 0), in[1], dt_in(op, 1), out[0], dt_out(op, 0),
                               rows, V, s);
}

void nll_loss(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  const NllLossArgs a = NllLossArgs::decode(op);  // core/runtime/layer_args.h
  const TensorMeta& lp = op.inputs[0].meta;
  expect_float(op, lp, "log_probs");
  // loss and total_weight have the log-probs' dtype (fp32, or bf16 / fp16 with loss "bf16_logits").
  for (size_t i = 0; i < 2; ++i) {
    FULLSHARD_CHECK(op.outputs[i].meta.numel() == 1,
                    where(op) + "loss and total_weight must be scalars");
    expect_float(op, op.outputs[i].meta, i == 0 ? "loss" : "total_weight");
  }
  FULLSHARD_CHECK(op.outputs[0].meta.dtype == op.outputs[1].meta.dtype,
                  where(op) + "loss and total_weight must share a dtype");
  launch::nll_loss(in[0], dt_in(op, 0), static_cast<const int64_t*>(in[1]), out[0], out[1],
                   dt_out(op, 0), a.rows, a.vocab, a.ignore_index, s);
}

void nll_loss_backward(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  const NllLossArgs a = NllLossArgs::decode(op);  // core/runtime/layer_args.h
  const TensorMeta &gl = op.inputs[0].meta, &gx = op.outputs[0].meta;
  FULLSHARD_CHECK(gl.numel() == 1 && is_float(gl.dtype) && op.inputs[2].meta.numel() == 1 &&
                      is_float(op.inputs[2].meta.dtype),
                  where(op) + "grad_loss and total_weight must be floating scalars");
  expect_float(op, gx, "grad_log_probs");
  launch::nll_loss_backward(in[0], dt_in(op, 0), static_cast<const int64_t*>(in[1]), in[2],
                            dt_in(op, 2), out[0], dt_out(op, 0), a.rows, a.vocab, a.ignore_index,
                            s);
}

void reduce(const OpCall& op, const Ptrs& in, const Ptrs& out, bool squares, cudaStream_t s) {
  decode_reduce(op);  // core/runtime/op_args.h
  expect_float(op, op.outputs[0].meta, "output");
  std::vector<launch::ReduceItem> items;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    expect_float(op, op.inputs[i].meta, "input");
    items.push_back({in[i], op.inputs[i].meta.numel(), dt_in(op, i)});
  }
  if (squares && op.outputs.size() == 2) {  // NOTE [Chunked squared norms] (rows.cu)
    std::vector<int64_t> numels;
    for (const auto& t : op.inputs) numels.push_back(t.meta.numel());
    const TensorMeta& scratch = op.outputs[1].meta;
    FULLSHARD_CHECK(
        scratch.dtype == DType::kFloat32 && scratch.numel() == foreach_norm_scratch_numel(numels),
        where(op) + "_foreach_norm's scratch must be fp32 [" +
            std::to_string(foreach_norm_scratch_numel(numels)) + "], got " +
            std::to_string(scratch.numel()) + " elements");
    const int64_t max_chunks =
        op.inputs.empty() ? 0 : scratch.numel() / static_cast<int64_t>(op.inputs.size());
    return launch::chunked_squared_norms(items.data(), static_cast<int>(items.size()),
                                         kForeachChunk, static_cast<float*>(out[1]), max_chunks,
                                         out[0], dt_out(op, 0), s);
  }
  launch::reduce_sums(items.data(), static_cast<int>(items.size()), squares, out[0], dt_out(op, 0),
                      s);
}

void clip_grad_scale(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  const ClipGradArgs c = ClipGradArgs::decode(op);  // core/runtime/layer_args.h
  expect_float(op, op.inputs[0].meta, "total");
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    const TensorMeta &gi = op.inputs[i + 1].meta, &go = op.outputs[i].meta;
    FULLSHARD_CHECK(gi.numel() == go.numel(),
                    where(op) + "gradient " + std::to_string(i) + " sizes differ");
    expect_float(op, gi, "gradient");
    expect_float(op, go, "gradient");
  }
  std::vector<launch::ClipTensor> t(op.outputs.size());  // multi-tensor (elementwise.cu)
  for (size_t i = 0; i < op.outputs.size(); ++i)
    t[i] = {in[i + 1], out[i], op.outputs[i].meta.numel(), dt_in(op, i + 1), dt_out(op, i)};
  launch::clip_scale(in[0], dt_in(op, 0), static_cast<float>(c.max_norm), t.data(),
                     static_cast<int>(t.size()), s);
}

void adamw(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  const AdamWArgs d = AdamWArgs::decode(op);  // layout, sizes and host scalars exactly as optim.cc
  const bool fused = d.fused;
  const size_t per_out = d.outputs_per_param;
  launch::AdamScalars a{d.decay,         d.one_minus_beta1,       d.beta2, d.one_minus_beta2,
                        d.neg_step_size, d.bias_correction2_sqrt, d.eps};
  for (size_t k = 0; k < d.params; ++k) {
    const size_t i = 4 * k, o = per_out * k;
    for (size_t t = 0; t < 4; ++t) expect_float(op, op.inputs[i + t].meta, "AdamW operand");
    for (size_t t = 0; t < per_out; ++t) expect_float(op, op.outputs[o + t].meta, "AdamW output");
  }
  std::vector<launch::AdamTensor> t(d.params);  // NOTE [Multi-tensor AdamW] in elementwise.cu
  for (size_t k = 0; k < d.params; ++k) {
    const size_t i = 4 * k, o = per_out * k;
    t[k] = {in[i],
            in[i + 1],
            in[i + 2],
            in[i + 3],
            out[o],
            out[o + 1],
            out[o + 2],
            fused ? nullptr : out[o + 3],
            op.inputs[i].meta.numel(),
            dt_in(op, i),
            dt_in(op, i + 1),
            dt_in(op, i + 2),
            dt_in(op, i + 3),
            dt_out(op, o),
            dt_out(op, o + 1),
            dt_out(op, o + 2),
            fused ? 0 : dt_out(op, o + 3)};
  }
  launch::adamw(a, t.data(), static_cast<int>(t.size()), s);
}

// ---- model.implementation compile: torch.compile's fused regions (compiled.cu), with the
// checks of the CPU kernels (backends/cpu/kernels/compiled.cc) in their order, then the dtypes.

void expect_float_operands(const OpCall& op) {
  for (const auto& r : op.inputs) expect_float(op, r.meta, "operand");
  for (const auto& r : op.outputs) expect_float(op, r.meta, "output");
}

// (x [, a], w) -> (y, rstd): RMSNorm of x, or of h = x + a (kCompiledAddRMSNorm).
void compiled_norm(const OpCall& op, const Ptrs& in, const Ptrs& out, bool add, cudaStream_t s) {
  const NormArgs r = NormArgs::decode(op);  // core/runtime/norm_args.h
  const size_t wi = r.weight;
  expect_float_rows(op, op.inputs[0].meta, op.inputs[wi].meta);
  if (add) expect_float(op, op.inputs[1].meta, "a");
  expect_float(op, op.outputs[0].meta, "output");
  launch::compiled_rms_norm(in[0], dt_in(op, 0), add ? in[1] : nullptr, add ? dt_in(op, 1) : 0,
                            in[wi], dt_in(op, wi), out[0], dt_out(op, 0),
                            static_cast<float*>(out[1]), r.rows, r.dim, r.eps, s);
}

// (g_y, x, rstd, w [, a] [, g_h]) -> (g_x, g_w); iargs {has_a, has_g_h}.
void compiled_norm_backward(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  const CompiledNormBackwardArgs r = CompiledNormBackwardArgs::decode(op);  // norm_args.h
  const bool has_a = r.has_a, has_gh = r.has_g_h;
  const size_t ia = r.a, igh = r.g_h;
  expect_float_operands(op);
  launch::CompiledNormBackward b{};
  b.g = in[0];
  b.dg = dt_in(op, 0);
  b.x = in[1];
  b.dx = dt_in(op, 1);
  b.rstd = static_cast<const float*>(in[2]);
  b.w = in[3];
  b.dw = dt_in(op, 3);
  if (has_a) {
    b.a = in[ia];
    b.da = dt_in(op, ia);
  }
  if (has_gh) {
    b.gh = in[igh];
    b.dgh = dt_in(op, igh);
  }
  b.gx = out[0];
  b.dgx = dt_out(op, 0);
  b.gw = out[1];
  b.dgw = dt_out(op, 1);
  launch::compiled_rms_norm_backward(b, r.rows, r.dim, s);
}

// (q, k) -> (q, k) or (g) -> (g_x); iargs {head_dim, adjacent}, fargs RopeParams::fargs().
void compiled_rope(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  const CompiledRopeArgs r = CompiledRopeArgs::decode(op);  // core/runtime/rope_args.h
  const bool backward = op.kind == OpKind::kCompiledRoPEBackward;
  const size_t n = r.tensors;
  const int64_t hd = r.head_dim;
  launch::RopeTensor t[2] = {};
  for (size_t i = 0; i < n; ++i) {
    expect_float(op, op.inputs[i].meta, "x");
    expect_float(op, op.outputs[i].meta, "output");
    const RopeArgs& ti = r.tensor[i];
    t[i] = {in[i], out[i], dt_in(op, i), dt_out(op, i), ti.rows, ti.seq, ti.width};
  }
  if (hd / 2 > launch::kMaxRopePairs)
    throw InputError(
        "model",
        "has head_dim " + std::to_string(hd) + ", above the " +
            std::to_string(2 * launch::kMaxRopePairs) +
            " that the CUDA kernel of the compiled RoPE takes",
        "train on the CPU backend (--backend cpu) or set model.implementation.compile to false");
  // NOTE [RoPE in fp32], NOTE [Llama 3 RoPE scaling]: the CPU kernel's table, computed the same
  // way.
  const std::vector<float> inv = rope_inv_freq(r.rope, hd);
  launch::compiled_rope(t, static_cast<int>(n), hd, r.adjacent, backward ? -1.0f : 1.0f, inv.data(),
                        s);
}

void compiled_silu_mul(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  expect_arity(op, 2, 1);  // (a, b) -> silu(a) * b
  const int64_t n = op.outputs[0].meta.numel();
  FULLSHARD_CHECK(op.inputs[0].meta.numel() == n && op.inputs[1].meta.numel() == n,
                  where(op) + "operand sizes differ");
  expect_float_operands(op);
  launch::compiled_silu_mul(in[0], dt_in(op, 0), in[1], dt_in(op, 1), out[0], dt_out(op, 0), n, s);
}

void compiled_silu_mul_backward(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  expect_arity(op, 3, 2);  // (g, a, b) -> (g_a, g_b)
  const int64_t n = op.inputs[0].meta.numel();
  for (size_t i = 1; i < 3; ++i)
    FULLSHARD_CHECK(op.inputs[i].meta.numel() == n, where(op) + "operand sizes differ");
  FULLSHARD_CHECK(op.outputs[0].meta.numel() == n && op.outputs[1].meta.numel() == n,
                  where(op) + "output sizes differ");
  expect_float_operands(op);
  launch::compiled_silu_mul_backward(in[0], dt_in(op, 0), in[1], dt_in(op, 1), in[2], dt_in(op, 2),
                                     out[0], dt_out(op, 0), out[1], dt_out(op, 1), n, s);
}

void compiled_residual_add(const OpCall& op, const Ptrs& in, const Ptrs& out, cudaStream_t s) {
  expect_arity(op, 3, 1);  // (x, a, f) -> x + a + f; out may be f
  const int64_t n = op.outputs[0].meta.numel();
  for (size_t i = 0; i < 3; ++i)
    FULLSHARD_CHECK(op.inputs[i].meta.numel() == n, where(op) + "operand sizes differ");
  expect_float_operands(op);
  launch::compiled_residual_add(in[0], dt_in(op, 0), in[1], dt_in(op, 1), in[2], dt_in(op, 2),
                                out[0], dt_out(op, 0), n, s);
}

// NOTE [Operand alignment]: every kernel here reads and writes an operand through pointers of
// its element type (load_f / store_f, the 8-wide vectors, cuBLASLt, cuDNN), and a GPU faults on
// an access that is not a multiple of its size (compute-sanitizer: "misaligned address"); the
// fault is sticky, so every later launch of the process fails too. No PyTorch tensor starts
// inside an element (storage offsets count elements), nor does any tensor the host program
// makes (views at element offsets of buffers from the caching allocator), so an operand off its
// element size is a caller's bug: refused here, naming the op and the operand, before anything
// is enqueued. Alignment beyond the element size (16 bytes for the vectorised paths) is each
// kernel's own choice, with a scalar path for the rest.
void check_alignment(const OpCall& op, const std::vector<TensorRef>& refs, const Ptrs& ptrs,
                     const char* side) {
  for (size_t i = 0; i < refs.size(); ++i) {
    const TensorMeta& m = refs[i].meta;
    const uintptr_t a = reinterpret_cast<uintptr_t>(ptrs[i]);
    const uint64_t es = dtype_size(m.dtype);
    if (refs[i].nbytes() == 0 || es <= 1 || a % es == 0) continue;
    FULLSHARD_CHECK(
        false, where(op) + side + " " + std::to_string(i) + " (" +
                   std::string(dtype_name(m.dtype)) + " " + shape_str(m.shape) + ") at address " +
                   std::to_string(a) + " is " + std::to_string(a % es) + " bytes into a " +
                   std::to_string(es) +
                   "-byte element: every operand must start at a multiple of its element size");
  }
}

}  // namespace

// The op table's kinds with a device kernel (not the backend's own host fills kLoadBatch /
// kInitParam: init_param.h, nor asynchronous TP's simulator-only collective matmuls), less
// QLoRA's NF4 kinds and the expert bias's / group routing's (is_load_balance_kind), which
// only the CPU backend runs so far (docs/qlora.md, docs/moe.md). Float8's kinds run
// here (float8_dispatch.cc; docs/float8.md), so do the mixture-of-experts kinds
// (moe_dispatch.cc; docs/moe.md) and context parallelism's (context_parallel_dispatch.cc;
// docs/context-parallel.md).
bool has_kernel(OpKind kind) {
  return has_device_kernel(kind) && !backends::is_nf4_kind(kind) &&
         !backends::is_load_balance_kind(kind);
}

void launch_kernel(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out,
                   const KernelContext& ctx) {
  check_addresses(op, in, out);                 // core/runtime/op_args.h
  check_alignment(op, op.inputs, in, "input");  // NOTE [Operand alignment]
  check_alignment(op, op.outputs, out, "output");
  const cudaStream_t s = ctx.stream;
  if (backends::is_float8_kind(op.kind)) return launch_float8(op, in, out, ctx);  // float8_dispatch.cc
  if (backends::is_moe_kind(op.kind)) return launch_moe(op, in, out, ctx);  // moe_dispatch.cc
  if (backends::is_context_parallel_kind(op.kind))  // context_parallel_dispatch.cc
    return launch_context_parallel(op, in, out, ctx);
  switch (op.kind) {
    case OpKind::kFill: return fill(op, out, s);
    case OpKind::kCopy: return run_copies(op, plan_copy(op), in, out, s);
    case OpKind::kAdd: return binary(launch::Ew::kAdd, op, in, out, s);
    case OpKind::kScale:
      return unary(launch::Ew::kScale, op, in, out,
                   static_cast<float>(ScalarArgs::decode(op).value), s);
    case OpKind::kEmbedding: return embedding(op, in, out, false, s);
    case OpKind::kEmbeddingBackward: return embedding(op, in, out, true, s);
    case OpKind::kRMSNorm: return norm(op, in, out, false, s);
    case OpKind::kRMSNormBackward:
    case OpKind::kRMSNormBackwardInput:
    case OpKind::kRMSNormBackwardWeight: return norm_backward(op, in, out, false, s);
    case OpKind::kLayerNorm: return norm(op, in, out, true, s);
    case OpKind::kLayerNormBackward: return norm_backward(op, in, out, true, s);
    case OpKind::kLinear:
    case OpKind::kLinearBackwardInput:
    case OpKind::kLinearBackwardWeight: return launch_gemm(op, in, out, ctx);
    case OpKind::kLinearBackwardBias: return linear_bias_backward(op, in, out, s);
    case OpKind::kRoPE: return rope(op, in, out, 1.0f, false, s);
    case OpKind::kRoPEBackward: return rope(op, in, out, -1.0f, false, s);
    case OpKind::kRoPEComplex:
      return rope(op, in, out, 1.0f, true, s);  // torchtitan's view_as_complex
    case OpKind::kRoPEComplexBackward: return rope(op, in, out, -1.0f, true, s);
    case OpKind::kAttention:
    case OpKind::kAttentionEfficient:
    case OpKind::kAttentionCudnn:
      return attention(op, in, out, ctx);  // NOTE [SDPA variants on the CUDA backend]
    case OpKind::kAttentionBackward:
    case OpKind::kAttentionEfficientBackward:
    case OpKind::kAttentionCudnnBackward: return attention_backward(op, in, out, ctx);
    case OpKind::kSiLU: return unary(launch::Ew::kSiLU, op, in, out, 0.0f, s);
    case OpKind::kSiLUBackward: return binary(launch::Ew::kSiLUBackward, op, in, out, s);
    case OpKind::kMul: return binary(launch::Ew::kMul, op, in, out, s);
    case OpKind::kMulBackward: {
      expect_arity(op, 3, 2);
      expect_same_numel(op);
      const int64_t n = op.inputs[0].meta.numel();
      launch::elementwise(launch::Ew::kMul, in[0], dt_in(op, 0), in[2], dt_in(op, 2), out[0],
                          dt_out(op, 0), n, 0.0f, s);
      launch::elementwise(launch::Ew::kMul, in[0], dt_in(op, 0), in[1], dt_in(op, 1), out[1],
                          dt_out(op, 1), n, 0.0f, s);
      return;
    }
    case OpKind::kGELU: return unary(launch::Ew::kGELU, op, in, out, 0.0f, s);
    case OpKind::kGELUBackward: return binary(launch::Ew::kGELUBackward, op, in, out, s);
    case OpKind::kPositionEmbedding: return position_embedding(op, in, out, false, s);
    case OpKind::kPositionEmbeddingBackward: return position_embedding(op, in, out, true, s);
    case OpKind::kLogSoftmax: return log_softmax(op, in, out, false, s);
    case OpKind::kLogSoftmaxBackward: return log_softmax(op, in, out, true, s);
    case OpKind::kNllLoss: return nll_loss(op, in, out, s);
    case OpKind::kNllLossBackward: return nll_loss_backward(op, in, out, s);
    case OpKind::kAllGatherCopyIn: return run_copies(op, plan_all_gather_copy_in(op), in, out, s);
    case OpKind::kAllGatherCopyOut: return run_copies(op, plan_all_gather_copy_out(op), in, out, s);
    case OpKind::kChunkCat: return run_copies(op, plan_chunk_cat(op), in, out, s);
    case OpKind::kSquaredNorm: return reduce(op, in, out, true, s);
    case OpKind::kSum: return reduce(op, in, out, false, s);
    case OpKind::kClipGradScale: return clip_grad_scale(op, in, out, s);
    case OpKind::kAdamW: return adamw(op, in, out, s);
    case OpKind::kPowScalar:
    case OpKind::kAddScalar:
    case OpKind::kRsqrt:
    case OpKind::kMulBroadcast:
    case OpKind::kSumLeadingDims:
    case OpKind::kExpandLastDim:
    case OpKind::kRepeatKV:
    case OpKind::kRepeatKVBackward:
    case OpKind::kRotaryCosSin:
    case OpKind::kRotateHalfCat:
      return launch_eager(op, in, out, s);  // eager_dispatch.cc
    // Tensor parallelism (tensor_parallel.h), with the two eager kinds its loss paths issue.
    case OpKind::kTransposeBlocks:
    case OpKind::kRowMax:
    case OpKind::kSubRow:
    case OpKind::kExp:
    case OpKind::kLog:
    case OpKind::kSumLastDim:
    case OpKind::kNllVocabParallel:
    case OpKind::kNllVocabParallelBackward:
    case OpKind::kNarrowCopy: return launch_tensor_parallel(op, in, out, s);
    case OpKind::kCompiledRMSNorm: return compiled_norm(op, in, out, false, s);
    case OpKind::kCompiledAddRMSNorm: return compiled_norm(op, in, out, true, s);
    case OpKind::kCompiledRMSNormBackward: return compiled_norm_backward(op, in, out, s);
    case OpKind::kCompiledRoPE:
    case OpKind::kCompiledRoPEBackward: return compiled_rope(op, in, out, s);
    case OpKind::kCompiledSiluMul: return compiled_silu_mul(op, in, out, s);
    case OpKind::kCompiledSiluMulBackward: return compiled_silu_mul_backward(op, in, out, s);
    case OpKind::kCompiledResidualAdd: return compiled_residual_add(op, in, out, s);
    // The host fills run in CudaDevice::launch; the simulator-only kinds are refused there
    // (backends/common/device_kernels.h).
    default: break;
  }
  FULLSHARD_CHECK(false, where(op) + "no CUDA kernel for this op kind");
}

}  // namespace fullshard::cuda
