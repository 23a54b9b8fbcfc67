// Host-side planning: operand checks, copy layouts, launch shapes and cuBLASLt layouts.
#include "backends/cuda/kernels/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/kernels/attention_fa2_plan.h"
#include "core/common/error.h"
#include "core/runtime/attention_args.h"
#include "core/runtime/copy_args.h"
#include "core/runtime/cudnn_sdpa_workspace.h"
#include "core/runtime/layer_args.h"
#include "core/tensor/float_convert.h"

namespace fullshard::cuda::plan {

static_assert(static_cast<int>(DType::kFloat32) == kF32 &&
                  static_cast<int>(DType::kBFloat16) == kBF16 &&
                  static_cast<int>(DType::kFloat16) == kF16 &&
                  static_cast<int>(DType::kUInt8) == kU8 && static_cast<int>(DType::kInt64) == kI64,
              "DCode must mirror DType");

std::string where(const OpCall& op) {
  return std::string(op_kind_name(op.kind)) + " '" + op.name + "': ";
}
int dcode(DType d) { return static_cast<int>(d); }
bool is_float(DType d) {
  return d == DType::kFloat32 || d == DType::kBFloat16 || d == DType::kFloat16;
}

void expect_arity(const OpCall& op, size_t n_in, size_t n_out) {
  FULLSHARD_CHECK(op.inputs.size() == n_in && op.outputs.size() == n_out,
                  where(op) + "expected " + std::to_string(n_in) + " inputs and " +
                      std::to_string(n_out) + " outputs, got " + std::to_string(op.inputs.size()) +
                      " and " + std::to_string(op.outputs.size()));
}

void expect_numel(const OpCall& op, const TensorMeta& m, int64_t n, const char* what) {
  FULLSHARD_CHECK(m.numel() == n, where(op) + what + " has " + std::to_string(m.numel()) +
                                      " elements, expected " + std::to_string(n));
}

Launch launch_1d(int64_t items, unsigned block) {
  Launch l;
  l.block = block;
  const int64_t blocks = (std::max<int64_t>(items, 1) + block - 1) / block;
  l.grid = static_cast<unsigned>(std::min(blocks, kMaxGrid));
  return l;
}

unsigned row_block(int64_t dim) {
  if (dim <= 1024) return 128;
  if (dim <= 4096) return 256;
  if (dim <= 16384) return 512;
  return 1024;
}

NormVec norm_vec(int64_t dim, int max_groups) {
  if (dim <= 0 || dim % 8 != 0) return {};
  const int64_t vecs = dim / 8;
  int64_t block = std::min<int64_t>(1024, round_up(vecs, 32));
  int groups = 1;
  while (block * groups < vecs) groups *= 2;
  if (groups > max_groups) return {};
  // With several groups, the fewest threads that still cover the row.
  if (groups > 1) block = std::min<int64_t>(1024, round_up((vecs + groups - 1) / groups, 32));
  return {static_cast<unsigned>(block), groups};
}

std::vector<MultiTensorBatch> plan_multi_tensor(const std::vector<int64_t>& numels, int64_t chunk,
                                                int max_tensors) {
  FULLSHARD_CHECK(chunk > 0 && max_tensors > 0,
                  "plan_multi_tensor: chunk and max_tensors must be positive");
  std::vector<MultiTensorBatch> out;
  MultiTensorBatch b;
  b.first_block = {0};
  const auto flush = [&](int next) {
    if (b.count > 0 && b.first_block.back() > 0) out.push_back(b);
    b = MultiTensorBatch{};
    b.first = next;
    b.first_block = {0};
  };
  for (size_t i = 0; i < numels.size(); ++i) {
    FULLSHARD_CHECK(numels[i] >= 0, "plan_multi_tensor: negative numel");
    if (b.count == max_tensors) flush(static_cast<int>(i));
    if (b.count == 0) b.first = static_cast<int>(i);
    b.first_block.push_back(b.first_block.back() + (numels[i] + chunk - 1) / chunk);
    ++b.count;
  }
  flush(static_cast<int>(numels.size()));
  return out;
}

// ------------------------------------------------------------------ copies

namespace {
Copy2D flat(int64_t n, int64_t dst_off = 0) {
  Copy2D c;
  c.rows = 1;
  c.cols = n;
  c.src_ld = n;
  c.src_limit = n;
  c.dst_off = dst_off;
  c.dst_ld = n;
  return c;
}
void check_cast(const OpCall& op, DType s, DType d) {
  FULLSHARD_CHECK(s == d || (is_float(s) && is_float(d)), where(op) + "cannot cast " +
                                                              std::string(dtype_name(s)) + " to " +
                                                              std::string(dtype_name(d)));
}
}  // namespace

std::vector<CopyJob> plan_copy(const OpCall& op) {
  const CopyArgs a = CopyArgs::decode(op);  // core/runtime/copy_args.h
  std::vector<CopyJob> jobs;
  if (a.rows == 0) {
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      const TensorMeta &s = op.inputs[k].meta, &d = op.outputs[k].meta;
      check_cast(op, s.dtype, d.dtype);
      jobs.push_back({k, k, flat(s.numel())});
    }
    return jobs;
  }
  const TensorMeta& d = op.outputs[0].meta;
  int64_t c0 = 0;
  for (size_t k = 0; k < op.inputs.size(); ++k) {
    const TensorMeta& s = op.inputs[k].meta;
    check_cast(op, s.dtype, d.dtype);
    Copy2D c;
    c.rows = a.rows;
    c.cols = a.cols[k];
    c.src_ld = c.cols;
    c.src_limit = s.numel();
    c.dst_off = c0;
    c.dst_ld = a.out_cols;
    c0 += c.cols;
    jobs.push_back({k, 0, c});
  }
  return jobs;
}

std::vector<CopyJob> plan_all_gather_copy_in(const OpCall& op) {
  decode_all_gather_copy_in(op);  // core/runtime/copy_args.h
  const TensorMeta& s = op.outputs[0].meta;
  std::vector<CopyJob> jobs;
  int64_t off = 0;
  for (size_t j = 0; j < op.inputs.size(); ++j) {
    const TensorMeta& m = op.inputs[j].meta;
    check_cast(op, m.dtype, s.dtype);
    jobs.push_back({j, 0, flat(m.numel(), off)});
    off += m.numel();
  }
  return jobs;
}

std::vector<CopyJob> plan_all_gather_copy_out(const OpCall& op) {
  const AllGatherCopyOutArgs a = AllGatherCopyOutArgs::decode(op);  // core/runtime/copy_args.h
  const int64_t W = a.world, row = a.row;
  const TensorMeta& ag = op.inputs[0].meta;
  std::vector<CopyJob> jobs;
  int64_t off = 0;
  for (size_t j = 0; j < a.sizes.size(); ++j) {
    const int64_t n = a.sizes[j];
    const TensorMeta& m = op.outputs[j].meta;
    check_cast(op, ag.dtype, m.dtype);
    Copy2D c;
    c.rows = W;
    c.cols = n;
    c.src_off = off;
    c.src_ld = row;
    c.src_limit = ag.numel();
    c.dst_ld = n;
    jobs.push_back({0, j, c});
    off += n;
  }
  return jobs;
}

std::vector<CopyJob> plan_chunk_cat(const OpCall& op) {
  const ChunkCatArgs a = ChunkCatArgs::decode(op);  // core/runtime/copy_args.h
  std::vector<CopyJob> jobs;
  int64_t row = 0;
  for (size_t j = 0; j < op.inputs.size(); ++j) {
    const TensorMeta& m = op.inputs[j].meta;
    const int64_t chunk = a.parts[j].chunk_rows * a.parts[j].row_numel;  // one rank's chunk
    check_cast(op, m.dtype, op.outputs[0].meta.dtype);
    Copy2D c;
    c.rows = a.world;
    c.cols = chunk;
    c.src_off = 0;
    c.src_ld = chunk;  // rank r's chunk starts at r * chunk in the (contiguous) grad
    c.src_limit = m.numel();
    c.dst_off = row;
    c.dst_ld = a.row;
    jobs.push_back({j, 0, c});
    row += chunk;
  }
  return jobs;
}

Copy2D to_bytes(const Copy2D& c, int64_t es) {
  Copy2D b = c;
  b.cols *= es;
  b.src_off *= es;
  b.src_ld *= es;
  b.src_limit *= es;
  b.dst_off *= es;
  b.dst_ld *= es;
  return b;
}

int copy_vector(const Copy2D& c, const void* src, int64_t src_es, const void* dst, int64_t dst_es,
                int max_vec) {
  const auto sa = reinterpret_cast<uintptr_t>(src), da = reinterpret_cast<uintptr_t>(dst);
  for (int v = max_vec; v > 1; v /= 2) {
    const bool fits = c.cols % v == 0 && c.src_off % v == 0 && c.src_ld % v == 0 &&
                      c.src_limit % v == 0 && c.dst_off % v == 0 && c.dst_ld % v == 0 &&
                      sa % static_cast<uintptr_t>(v * src_es) == 0 &&
                      da % static_cast<uintptr_t>(v * dst_es) == 0;
    // Only whole 16-byte (or 8-byte) accesses pay: narrower vectors are not worth a variant.
    if (fits) return v;
  }
  return 1;
}

void fill_pattern(DType d, double value, unsigned char out[16]) {
  const int es = static_cast<int>(dtype_size(d));
  unsigned char e[8] = {};
  switch (d) {
    case DType::kFloat32: {
      const float f = static_cast<float>(value);
      std::memcpy(e, &f, 4);
      break;
    }
    case DType::kBFloat16: {
      const uint16_t h = float_to_bf16(static_cast<float>(value));
      std::memcpy(e, &h, 2);
      break;
    }
    case DType::kFloat16: {
      const uint16_t h = float_to_fp16(static_cast<float>(value));
      std::memcpy(e, &h, 2);
      break;
    }
    case DType::kUInt8: e[0] = static_cast<uint8_t>(value); break;
    case DType::kFloat8E4M3FN:  // a float8 fill of 0 (the only value the model fills them with)
    case DType::kFloat8E5M2: e[0] = 0; break;
    case DType::kInt64: {
      const int64_t i = static_cast<int64_t>(value);
      std::memcpy(e, &i, 8);
      break;
    }
  }
  for (int i = 0; i < 16; ++i) out[i] = e[i % es];
}

// ------------------------------------------------------------------ norms

void expect_float_rows(const OpCall& op, const TensorMeta& x, const TensorMeta& w) {
  FULLSHARD_CHECK(is_float(x.dtype) && is_float(w.dtype), where(op) + "x and w must be floating");
}

// ------------------------------------------------------------------ gemm

// NOTE [Row-major GEMMs in cuBLASLt]: a row-major [r, c] matrix is a column-major [c, r] one
// with leading dimension c, so each row-major product Y = A B is computed as Y^T = B^T A^T in
// column-major terms, swapping the operands:
//   kLinear               y [M,N] = x [M,K] W[N,K]^T  ->  C[N,M] = op_T(W: K x N, ld K) * x (K x M,
//   ld K) kLinearBackwardInput  gx[M,K] = g [M,N] W[N,K]    ->  C[K,M] = W (K x N, ld K) * g (N x
//   M, ld N) kLinearBackwardWeight gW[N,K] = g^T[N,M] x[M,K]   ->  C[K,N] = x (K x M, ld K) *
//   op_T(g: N x M, ld N)
GemmPlan plan_gemm(const OpCall& op) {
  const LinearArgs l = LinearArgs::decode(op);  // core/runtime/layer_args.h
  const int64_t M = l.m, K = l.k, N = l.n;
  GemmPlan p;
  switch (op.kind) {
    case OpKind::kLinear:
      FULLSHARD_CHECK(op.inputs.size() == 2 || op.inputs.size() == 3,
                      where(op) + "expects (x, W[, b])");
      expect_arity(op, op.inputs.size(), 1);
      expect_numel(op, op.inputs[0].meta, M * K, "x");
      expect_numel(op, op.inputs[1].meta, N * K, "W");
      expect_numel(op, op.outputs[0].meta, M * N, "y");
      p = {true, false, N, M, K, K, K, N, 1, 0, op.inputs.size() == 3};
      if (p.bias) expect_numel(op, op.inputs[2].meta, N, "b");
      break;
    case OpKind::kLinearBackwardInput:
      expect_arity(op, 2, 1);
      expect_numel(op, op.inputs[0].meta, M * N, "grad_y");
      expect_numel(op, op.inputs[1].meta, N * K, "W");
      expect_numel(op, op.outputs[0].meta, M * K, "grad_x");
      p = {false, false, K, M, N, K, N, K, 1, 0, false};
      break;
    case OpKind::kLinearBackwardWeight:
      expect_arity(op, 2, 1);
      expect_numel(op, op.inputs[0].meta, M * N, "grad_y");
      expect_numel(op, op.inputs[1].meta, M * K, "x");
      expect_numel(op, op.outputs[0].meta, N * K, "grad_W");
      p = {false, true, K, N, M, K, N, K, 1, 0, false};
      break;
    default: FULLSHARD_CHECK(false, where(op) + "not a linear op");
  }
  const DType da = op.inputs[p.a_in].meta.dtype, db = op.inputs[p.b_in].meta.dtype,
              dc = op.outputs[0].meta.dtype;
  FULLSHARD_CHECK(is_float(da) && da == db && (dc == da || dc == DType::kFloat32),
                  where(op) +
                      "cuBLASLt runs equal-dtype operands into the same dtype or fp32, got " +
                      std::string(dtype_name(da)) + " x " + std::string(dtype_name(db)) + " -> " +
                      std::string(dtype_name(dc)));
  return p;
}

void reference_gemm(const GemmPlan& p, const double* a, const double* b, const double* bias,
                    double* c) {
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t i = 0; i < p.m; ++i) {
      double acc = bias ? bias[i] : 0.0;
      for (int64_t l = 0; l < p.k; ++l) {
        const double av = p.trans_a ? a[l + i * p.lda] : a[i + l * p.lda];
        const double bv = p.trans_b ? b[j + l * p.ldb] : b[l + j * p.ldb];
        acc += av * bv;
      }
      c[i + j * p.ldc] = acc;
    }
}

// ------------------------------------------------------------------ attention

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

namespace {
AttnPlan attn_common(const OpCall& op) {
  const AttentionArgs a = AttentionArgs::decode(op);  // core/runtime/attention_args.h
  AttnPlan p;
  AttnLayout& l = p.l;
  l = {a.batch, a.seq,   a.heads, a.kv_heads, a.head_dim, a.q_ld,   a.kv_ld,
       a.q_off, a.k_off, a.v_off, a.group,    a.scale,    a.lse_len};
  p.packed = a.packed;
  // Multi-head latent attention's v head size differs from q / k's: the CUDA attention kernels
  // read one head size for all three (core/model/mla_attention.cc; docs/cuda-kernels.md).
  FULLSHARD_CHECK(a.vd() == a.head_dim,
                  where(op) + "v_head_dim " + std::to_string(a.vd()) + " != head_dim " +
                      std::to_string(a.head_dim) +
                      " (multi-head latent attention) has no CUDA kernel yet; train it with "
                      "--backend cpu or simulate it");
  FULLSHARD_CHECK(l.hd <= 256,
                  where(op) + "head_dim " + std::to_string(l.hd) + " above 256 is not supported");
  // The kernels put (batch, head) on gridDim.y, which CUDA caps at 65535.
  FULLSHARD_CHECK(l.B * l.H <= 65535,
                  where(op) + "batch x heads " + std::to_string(l.B * l.H) +
                      " is above CUDA's 65535 blocks in grid dimension y; lower "
                      "training.batch_per_rank (or use gradient accumulation)");
  p.softmax_d_ld = round_up(l.S, 128);
  return p;
}
void check_qkv(const OpCall& op, const AttnPlan& p, size_t first) {
  const int64_t tokens = p.l.B * p.l.S;
  if (p.packed) {
    expect_numel(op, op.inputs[first].meta, tokens * p.l.q_ld, "qkv");
  } else {
    expect_numel(op, op.inputs[first].meta, tokens * p.l.q_ld, "q");
    expect_numel(op, op.inputs[first + 1].meta, tokens * p.l.kv_ld, "k");
    expect_numel(op, op.inputs[first + 2].meta, tokens * p.l.kv_ld, "v");
    FULLSHARD_CHECK(op.inputs[first].meta.dtype == op.inputs[first + 1].meta.dtype &&
                        op.inputs[first].meta.dtype == op.inputs[first + 2].meta.dtype,
                    where(op) + "q, k and v must share a dtype");
  }
  FULLSHARD_CHECK(is_float(op.inputs[first].meta.dtype), where(op) + "q, k, v must be floating");
}
}  // namespace

// NOTE [SDPA variants on the CUDA backend]: the efficient and cuDNN kinds (NOTE [SDPA
// backends], core/model/attention_variants.cc) run the flash kernels: the same maths into the
// same O and logsumexp, whose rows are lse_ld long (efficient pads them to round32(S)). What
// each PyTorch backend allocates beyond that comes as the op's scratch outputs, sized by the
// model, so the allocator sees the same blocks the simulator predicts: the efficient forward's
// output accumulator (head dims above 128) is left unwritten; the backward's softmax_d lives in
// the efficient kernel's delta [B, H, S] or in the first B*H*S floats of cuDNN's workspace
// (the flash kernels' own use of it when cuDNN declines the call), rows S long;
// efficient's dq workspace is left unwritten. Where the build has cuDNN, kAttentionCudnn runs
// cuDNN itself (NOTE [cuDNN attention on the CUDA backend], cudnn_sdpa.cc).
AttnPlan plan_attention(const OpCall& op) {
  AttnPlan p = attn_common(op);
  const bool accum = op.kind == OpKind::kAttentionEfficient && op.outputs.size() == 3;  // hd > 128
  expect_arity(op, p.packed ? 1 : 3, accum ? 3 : 2);
  check_qkv(op, p, 0);
  const int64_t tokens = p.l.B * p.l.S;
  expect_numel(op, op.outputs[0].meta, tokens * p.l.H * p.l.hd, "o");
  expect_numel(op, op.outputs[1].meta, p.l.B * p.l.H * p.l.lse_ld, "logsumexp");
  if (accum) {
    FULLSHARD_CHECK(op.outputs[2].meta.dtype == DType::kFloat32,
                    where(op) + "output_accum must be fp32");
    expect_numel(op, op.outputs[2].meta, tokens * p.l.H * p.l.hd, "output_accum");
  }
  FULLSHARD_CHECK(op.outputs[1].meta.dtype == DType::kFloat32,
                  where(op) + "logsumexp must be fp32");
  FULLSHARD_CHECK(is_float(op.outputs[0].meta.dtype), where(op) + "o must be floating");
  return p;
}

AttnPlan plan_attention_backward(const OpCall& op) {
  AttnPlan p = attn_common(op);
  const AttnLayout& l = p.l;
  const size_t n_in = p.packed ? 4 : 6;
  const bool gqa = l.H != l.Hkv;
  FULLSHARD_CHECK(op.inputs.size() == n_in,
                  where(op) + "expected " + std::to_string(n_in) + " inputs");
  // NOTE [Flash attention backward temporaries] (core/model/ops.cc): dq, dk, dv, then
  // softmax_d and dq_accum, then dk / dv at the query head count when H != Hkv. The efficient
  // and cuDNN kinds: NOTE [SDPA variants on the CUDA backend].
  const bool flash = op.kind == OpKind::kAttentionBackward,
             cudnn = op.kind == OpKind::kAttentionCudnnBackward;
  const size_t n_out = cudnn ? 4 : !flash ? 5 : gqa ? 7 : 5;
  FULLSHARD_CHECK(op.outputs.size() == n_out,
                  where(op) + "expected " + std::to_string(n_out) + " outputs (dq, dk, dv, " +
                      (cudnn   ? "cuDNN's workspace"
                       : flash ? "softmax_d, dq_accum[, dk_expanded, dv_expanded]"
                               : "delta, workspace") +
                      "), got " + std::to_string(op.outputs.size()));
  check_qkv(op, p, 1);
  p.o_in = p.packed ? 2 : 4;
  p.lse_in = p.o_in + 1;
  const int64_t tokens = l.B * l.S, D = l.H * l.hd, Dkv = l.Hkv * l.hd;
  expect_numel(op, op.inputs[0].meta, tokens * D, "dO");
  expect_numel(op, op.inputs[p.o_in].meta, tokens * D, "O");
  expect_numel(op, op.inputs[p.lse_in].meta, l.B * l.H * l.lse_ld, "logsumexp");
  FULLSHARD_CHECK(op.inputs[p.lse_in].meta.dtype == DType::kFloat32,
                  where(op) + "logsumexp must be fp32");
  expect_numel(op, op.outputs[0].meta, tokens * D, "dq");
  expect_numel(op, op.outputs[1].meta, tokens * Dkv, "dk");
  expect_numel(op, op.outputs[2].meta, tokens * Dkv, "dv");
  for (size_t i = 0; i < 3; ++i)
    FULLSHARD_CHECK(is_float(op.outputs[i].meta.dtype), where(op) + "grads must be floating");
  p.has_temps = true;
  const TensorMeta& sd = op.outputs[3].meta;
  FULLSHARD_CHECK(sd.dtype == DType::kFloat32, where(op) +
                                                   (flash   ? "softmax_d"
                                                    : cudnn ? "the workspace"
                                                            : "delta") +
                                                   " must be fp32");
  if (cudnn) {  // one block of cudnn_sdpa_workspace's total bytes (NOTE [cuDNN SDPA workspace])
    expect_numel(op, sd, cudnn_sdpa_workspace(true, l.B, l.S, l.H, l.hd).total() / 4,
                 "cuDNN workspace");
    p.softmax_d_ld = l.S;
    return p;
  }
  if (!flash) {  // delta [B, H, S], then the dq workspace [B, H, round128(S), round128(hd)]
    expect_numel(op, sd, l.B * l.H * l.S, "delta");
    FULLSHARD_CHECK(op.outputs[4].meta.dtype == DType::kFloat32,
                    where(op) + "the workspace must be fp32");
    expect_numel(op, op.outputs[4].meta, l.B * l.H * round_up(l.S, 128) * round_up(l.hd, 128),
                 "workspace");
    p.softmax_d_ld = l.S;
    return p;
  }
  const TensorMeta& acc = op.outputs[4].meta;
  expect_numel(op, sd, l.B * l.H * p.softmax_d_ld, "softmax_d");
  FULLSHARD_CHECK(acc.dtype == DType::kFloat32, where(op) + "dq_accum must be fp32");
  expect_numel(op, acc, l.B * p.softmax_d_ld * l.H * round_up(l.hd, 32), "dq_accum");
  if (gqa) {
    expect_numel(op, op.outputs[5].meta, tokens * D, "dk_expanded");
    expect_numel(op, op.outputs[6].meta, tokens * D, "dv_expanded");
  }
  return p;
}

bool attention_uses_tensor_cores(const AttnPlan& p, DType dt) {
  return (dt == DType::kBFloat16 || dt == DType::kFloat16) && (p.l.hd == 64 || p.l.hd == 128);
}

bool attention_uses_fa2(const AttnPlan& p, DType dt) {
  return (dt == DType::kBFloat16 || dt == DType::kFloat16) && fa2::supports_head_dim(p.l.hd);
}

AttentionKernels parse_attention_kernels(const char* value) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "auto") return AttentionKernels::kAuto;
  if (v == "wmma") return AttentionKernels::kWmma;
  if (v == "simt") return AttentionKernels::kSimt;
  throw InputError("FULLSHARD_ATTENTION_KERNELS", "unknown value '" + v + "'",
                   "set it to 'auto' (FlashAttention-2), 'wmma' (the WMMA tensor-core kernels) or "
                   "'simt', or unset it");
}

AttentionKernels attention_kernels_from_env() {
  static const AttentionKernels k =
      parse_attention_kernels(std::getenv("FULLSHARD_ATTENTION_KERNELS"));
  return k;
}

int64_t embedding_backward_smem(int64_t dim) { return dim * 4; }

}  // namespace fullshard::cuda::plan
