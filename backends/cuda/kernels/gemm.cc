// cuBLASLt matmuls for the linear ops: bf16 / fp16 operands with fp32 compute, fp32 operands with
// CUBLAS_COMPUTE_32F (no TF32), output in the operands' dtype or fp32, bias as an epilogue.
#include "backends/cuda/kernels/gemm.h"

#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"

namespace fullshard::cuda {

namespace {

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::kBFloat16: return CUDA_R_16BF;
    case DType::kFloat16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

// Largest power of two (at most 256) dividing the address: what cuBLASLt's heuristics may assume.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

void lt_check(cublasStatus_t st, const OpCall& op, const char* what) {
  FULLSHARD_CHECK(st == CUBLAS_STATUS_SUCCESS, plan::where(op) + "cuBLASLt " + what +
                                                   " failed with status " +
                                                   std::to_string(static_cast<int>(st)));
}

// NOTE [cuBLASLt plan cache]: descriptors, layouts and the heuristic's first algorithm depend
// only on the shape, dtypes, transposes, bias, pointer alignments and workspace size, so they
// are created once per distinct key and reused for every later launch (a training step repeats
// a few dozen shapes). The mutex also covers the per-call bias pointer, which lives in the
// shared matmul descriptor.
using Key = std::tuple<cublasLtHandle_t, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int, int, int, int, uint32_t, uint32_t, uint32_t, uint32_t, size_t>;
struct Entry {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool bias_epilogue = false;  // false: the bias (if any) is preloaded into C with beta = 1
};
struct Cache {
  std::mutex mu;
  std::map<Key, Entry> entries;
  ~Cache() {
    for (auto& [k, e] : entries) {
      cublasLtMatrixLayoutDestroy(e.a);
      cublasLtMatrixLayoutDestroy(e.b);
      cublasLtMatrixLayoutDestroy(e.c);
      cublasLtMatmulDescDestroy(e.desc);
    }
  }
};
Cache& cache() {
  static Cache c;
  return c;
}

// Creates the descriptors and asks the heuristic for an algorithm; with `epilogue`, the bias is
// fused. Returns false when the heuristic offers nothing.
bool build(const OpCall& op, const plan::GemmPlan& p, const KernelContext& ctx, DType dab, DType dc,
           DType dbias, bool epilogue, const uint32_t align[4], Entry& e) {
  lt_check(cublasLtMatmulDescCreate(&e.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), op,
           "matmul descriptor");
  const cublasOperation_t ta = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                          tb = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  lt_check(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), op,
           "transa");
  lt_check(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), op,
           "transb");
  if (epilogue) {  // a bias dtype cuBLASLt refuses falls back to the preloaded bias
    const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bt = cuda_type(dbias);
    if (cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                       sizeof(bt)) != CUBLAS_STATUS_SUCCESS) {
      cublasLtMatmulDescDestroy(e.desc);
      e = Entry{};
      return false;
    }
  }
  const uint64_t ar = p.trans_a ? p.k : p.m, ac = p.trans_a ? p.m : p.k;
  const uint64_t br = p.trans_b ? p.n : p.k, bc = p.trans_b ? p.k : p.n;
  lt_check(cublasLtMatrixLayoutCreate(&e.a, cuda_type(dab), ar, ac, p.lda), op, "layout A");
  lt_check(cublasLtMatrixLayoutCreate(&e.b, cuda_type(dab), br, bc, p.ldb), op, "layout B");
  lt_check(cublasLtMatrixLayoutCreate(&e.c, cuda_type(dc), p.m, p.n, p.ldc), op, "layout C");
  cublasLtMatmulPreference_t pref = nullptr;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), op, "preference");
  if (!apply_gemm_preference(
          gemm_preference(ctx.gemm_workspace_bytes, align[0], align[1], align[2]), pref)) {
    cublasLtMatmulPreferenceDestroy(pref);
    lt_check(CUBLAS_STATUS_INVALID_VALUE, op, "preference attribute");
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(ctx.lt, e.desc, e.a, e.b, e.c, e.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(e.a);
    cublasLtMatrixLayoutDestroy(e.b);
    cublasLtMatrixLayoutDestroy(e.c);
    cublasLtMatmulDescDestroy(e.desc);
    e = Entry{};
    return false;
  }
  e.algo = result.algo;
  e.bias_epilogue = epilogue;
  return true;
}

}  // namespace

// NOTE [Split-K partial sums in fp32]: for a small m x n and a long k the heuristic picks
// split-K algorithms, whose partial products are summed in a second step. By default cuBLASLt
// may store those partials in the output type (CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE) or sum
// them in place in C (INPLACE): for bf16 / fp16 outputs each partial is rounded to 8 / 11 bits
// before the sum, so a result that cancels loses most of its digits (the GPU run: 0.0234 where
// the fp32-accumulated reference gives 0.0272, 257 x 129 x 65 bf16; without a workspace, no
// split-K, it matched). PyTorch's default (torch.backends.cuda.matmul.
// allow_bf16_reduced_precision_reduction = True, and the same for fp16) leaves the mask unset and
// accepts this; with it False, CUDABlas.cpp sets CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION
// on its cublasGemmEx calls and the mask COMPUTE_TYPE | NONE on its cuBLASLt ones (NONE alone
// when split-K is also disallowed). fullshard asks for
// COMPUTE_TYPE | NONE always: partials in fp32 (the compute type) in the workspace, or no split,
// which is what docs/kernels.md promises (fp32 accumulation, one rounding to the output) and what
// the CPU reference computes. It costs the partials' fp32 bytes in the workspace the model already
// gives each GEMM (blas_workspace_bytes), nothing more; fp32 outputs are unaffected (their output
// type is the compute type).
GemmPreference gemm_preference(uint64_t workspace_bytes, uint32_t align_a, uint32_t align_b,
                               uint32_t align_c) {
  GemmPreference p;
  p.max_workspace_bytes = workspace_bytes;
  p.min_alignment_a = align_a;
  p.min_alignment_b = align_b;
  p.min_alignment_c = align_c;
  p.min_alignment_d = align_c;  // D is C (the output is written in place of C)
  p.reduction_scheme_mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_NONE;
  return p;
}

bool apply_gemm_preference(const GemmPreference& p, cublasLtMatmulPreference_t pref) {
  auto set = [&](cublasLtMatmulPreferenceAttributes_t a, const void* v, size_t n) {
    return cublasLtMatmulPreferenceSetAttribute(pref, a, v, n) == CUBLAS_STATUS_SUCCESS;
  };
  return set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &p.max_workspace_bytes,
             sizeof(p.max_workspace_bytes)) &&
         set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p.min_alignment_a, sizeof(uint32_t)) &&
         set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p.min_alignment_b, sizeof(uint32_t)) &&
         set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p.min_alignment_c, sizeof(uint32_t)) &&
         set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p.min_alignment_d, sizeof(uint32_t)) &&
         set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &p.reduction_scheme_mask,
             sizeof(uint32_t));
}

size_t gemm_cache_size() {
  std::lock_guard<std::mutex> lock(cache().mu);
  return cache().entries.size();
}

void launch_gemm(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out,
                 const KernelContext& ctx) {
  const plan::GemmPlan p = plan::plan_gemm(op);
  FULLSHARD_CHECK(ctx.lt != nullptr, plan::where(op) + "no cuBLASLt handle in the kernel context");
  const DType dab = op.inputs[p.a_in].meta.dtype, dc = op.outputs[0].meta.dtype;
  const DType dbias = p.bias ? op.inputs[2].meta.dtype : dc;
  const int cdt = plan::dcode(dc);
  const int64_t es_c = static_cast<int64_t>(dtype_size(dc));
  if (p.m == 0 || p.n == 0) return;
  // Preloads every column of C (row of y) with the bias: NOTE [Strided 2-D copy] with a zero
  // source stride.
  auto preload_bias = [&] {
    Copy2D c;
    c.rows = p.n;
    c.cols = p.m;
    c.src_ld = 0;
    c.src_limit = p.m;
    c.dst_ld = p.ldc;
    launch::copy2d_cast(c, in[2], plan::dcode(dbias), out[0], cdt, 1, ctx.stream);
  };
  if (p.k == 0) {  // an empty sum: y = bias or 0
    if (p.bias) {
      preload_bias();
    } else if (cudaMemsetAsync(out[0], 0, static_cast<size_t>(p.m * p.n * es_c), ctx.stream) !=
               cudaSuccess) {
      launch::check_launch("linear zero output");
    }
    return;
  }
  const uint32_t align[4] = {alignment(in[p.a_in]), alignment(in[p.b_in]), alignment(out[0]),
                             p.bias ? alignment(in[2]) : 256u};
  const Key key{ctx.lt,
                p.trans_a,
                p.trans_b,
                p.m,
                p.n,
                p.k,
                p.lda,
                p.ldb,
                p.ldc,
                static_cast<int>(dab),
                static_cast<int>(dc),
                p.bias ? static_cast<int>(dbias) : -1,
                static_cast<int>(op.kind),
                align[0],
                align[1],
                align[2],
                align[3],
                ctx.gemm_workspace_bytes};
  std::lock_guard<std::mutex> lock(cache().mu);
  auto it = cache().entries.find(key);
  if (it == cache().entries.end()) {
    Entry e;
    const bool ok =
        (p.bias && align[3] >= 16 && build(op, p, ctx, dab, dc, dbias, true, align, e)) ||
        build(op, p, ctx, dab, dc, dbias, false, align, e);
    FULLSHARD_CHECK(ok,
                    plan::where(op) + "cuBLASLt found no algorithm for m=" + std::to_string(p.m) +
                        " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) + " (" +
                        std::string(dtype_name(dab)) + " -> " + std::string(dtype_name(dc)) + ")");
    it = cache().entries.emplace(key, e).first;
  }
  Entry& e = it->second;
  const float alpha = 1.0f;
  float beta = 0.0f;
  if (p.bias && e.bias_epilogue) {
    const void* bp = in[2];
    lt_check(
        cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)),
        op, "bias pointer");
  } else if (p.bias) {
    preload_bias();
    beta = 1.0f;
  }
  lt_check(cublasLtMatmul(ctx.lt, e.desc, &alpha, in[p.a_in], e.a, in[p.b_in], e.b, &beta, out[0],
                          e.c, out[0], e.c, &e.algo, ctx.gemm_workspace, ctx.gemm_workspace_bytes,
                          ctx.stream),
           op, "matmul");
}

}  // namespace fullshard::cuda
