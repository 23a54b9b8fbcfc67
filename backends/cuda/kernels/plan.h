#pragma once
// Host-side planning for the CUDA kernels, plain C++ and testable without a GPU
// (tests/gpu/cuda_kernels_plan_test.cc): operand decoding and validation against the contracts
// of docs/kernels.md, copy layouts, launch shapes and the cuBLASLt layout of each linear op.
// Every function throws InternalError naming the op on a layout it cannot run.
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/kernels/index_math.h"
#include "core/runtime/op.h"

namespace fullshard::cuda::plan {

std::string where(const OpCall& op);  // "kCopy 'layers.0 ...': "
int dcode(DType d);
bool is_float(DType d);
void expect_arity(const OpCall& op, size_t n_in, size_t n_out);
void expect_numel(const OpCall& op, const TensorMeta& m, int64_t n, const char* what);

// ---- launch shapes
struct Launch {
  unsigned grid = 1, block = 1;
};
constexpr int64_t kMaxGrid = 1 << 16;  // grid-stride loops cover the rest
// `items` work items (threads' worth) in blocks of `block`, at most kMaxGrid blocks; at least 1.
Launch launch_1d(int64_t items, unsigned block = 256);
// Threads per block for a kernel that gives one block to each row of `dim` elements: up to 1024,
// so every kernel launched with it (or with a literal 1024) carries __launch_bounds__(1024),
// which caps it at 64 registers a thread; without it a kernel over 64 registers fails to launch
// ("too many resources requested") at 1024 threads, on the GPU only.
unsigned row_block(int64_t dim);

// ---- copies (NOTE [Strided 2-D copy] in index_math.h)
struct CopyJob {
  size_t in = 0, out = 0;  // operand indices (inputs / outputs)
  Copy2D c;
};
std::vector<CopyJob> plan_copy(const OpCall& op);  // kCopy (pairwise / foreach / row concat)
std::vector<CopyJob> plan_all_gather_copy_in(const OpCall& op);
std::vector<CopyJob> plan_all_gather_copy_out(const OpCall& op);
std::vector<CopyJob> plan_chunk_cat(const OpCall& op);
// The same copy in bytes (same-dtype copies are bit copies of any dtype).
Copy2D to_bytes(const Copy2D& c, int64_t elem_size);
// Elements per vector access (a power of two, 1 if none fits): every offset, stride, width and
// limit is a multiple of it and both addresses are aligned to it times the element sizes.
int copy_vector(const Copy2D& c, const void* src, int64_t src_es, const void* dst, int64_t dst_es,
                int max_vec);

// 16 bytes of `value` stored in dtype `d`, repeated (fill's store pattern).
void fill_pattern(DType d, double value, unsigned char out[16]);

// ---- norms and rows (their layout: NormArgs, core/runtime/norm_args.h)
void expect_float_rows(const OpCall& op, const TensorMeta& x, const TensorMeta& w);
// NOTE [Norm rows in registers] (norm_rows.cuh): a row of `dim` elements held by `block` threads,
// each with `groups` 8-element vectors (thread t: vectors t, t + block, ...). groups is 0 (use
// the scalar kernels) unless dim % 8 == 0 and the row fits in max_groups (1, 2 or 4) vectors a
// thread of up to 1024 threads; groups is a power of two, block a multiple of 32 and
// block * groups * 8 >= dim (every vector has a thread).
struct NormVec {
  unsigned block = 0;
  int groups = 0;
};
NormVec norm_vec(int64_t dim, int max_groups);

// ---- linear through cuBLASLt (column-major): the row-major products of docs/kernels.md
// written as C (m x n, ldc) = op(A) (m x k) * op(B) (k x n); a_in / b_in are input indices.
struct GemmPlan {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  size_t a_in = 0, b_in = 0;
  bool bias = false;  // input 2 is a bias [m] added to every column of C (kLinear only)
};
GemmPlan plan_gemm(const OpCall& op);  // kLinear, kLinearBackwardInput, kLinearBackwardWeight
// Reference semantics of a plan over fp64 column-major arrays (what cuBLASLt computes), used by
// the host tests to check the layouts against the CPU kernels.
void reference_gemm(const GemmPlan& p, const double* a, const double* b, const double* bias,
                    double* c);

// ---- attention
struct AttnPlan {
  AttnLayout l;
  bool packed = false;
  size_t o_in = 0, lse_in = 0;  // backward: input indices of O and lse
  bool has_temps = false;       // backward: softmax_d, dq_accum (+ expanded dk/dv) passed
  int64_t softmax_d_ld = 0;     // flash: round128(S); efficient / cuDNN: S
};
AttnPlan plan_attention(const OpCall& op);  // kAttention, kAttentionEfficient, kAttentionCudnn
AttnPlan plan_attention_backward(const OpCall& op);  // their backward kinds
int64_t round_up(int64_t v, int64_t m);
// Tensor-core (WMMA) flash kernels run bf16 / fp16 with these head dims; others use the SIMT path.
bool attention_uses_tensor_cores(const AttnPlan& p, DType dt);
// The FlashAttention-2 kernels (mma.sync, sm_80+) run bf16 / fp16 at head_dim 32, 64, 80, 96, 128.
bool attention_uses_fa2(const AttnPlan& p, DType dt);
// NOTE [Attention kernel override]: FULLSHARD_ATTENTION_KERNELS picks the flash kernels without
// a rebuild, so that a GPU session can step around a faulty kernel: unset, empty or "auto" runs
// FlashAttention-2 where it applies, else the WMMA tensor-core kernels where they apply, else
// SIMT; "wmma" skips FlashAttention-2; "simt" runs the SIMT kernels everywhere. Any other value
// is refused. The variable is read once per process.
enum class AttentionKernels { kAuto, kWmma, kSimt };
AttentionKernels parse_attention_kernels(const char* value);  // nullptr = unset; throws InputError
AttentionKernels attention_kernels_from_env();                // FULLSHARD_ATTENTION_KERNELS, cached

// ---- multi-tensor launches (NOTE [Multi-tensor AdamW] in elementwise.cu), as PyTorch's
// multi_tensor_apply: tensors cut into `chunk`-element chunks, a block per chunk, up to
// max_tensors tensors a launch. Batch k covers tensors [first, first + count); its block b
// works on chunk b - first_block[t] of tensor first + t for the t with first_block[t] <= b <
// first_block[t + 1] (first_block has count + 1 entries, first_block[0] = 0, and the last is the
// launch's block count). Empty tensors have no chunk; a batch with no blocks is not listed.
struct MultiTensorBatch {
  int first = 0, count = 0;
  std::vector<int64_t> first_block;
};
std::vector<MultiTensorBatch> plan_multi_tensor(const std::vector<int64_t>& numels, int64_t chunk,
                                                int max_tensors);

// ---- embedding backward: dynamic shared memory it needs (fp32 accumulator row)
int64_t embedding_backward_smem(int64_t dim);
constexpr int64_t kMaxDynamicSmem = 96 * 1024;  // opt-in limit sm_80 / sm_90 both allow

}  // namespace fullshard::cuda::plan
