// Host side of the tensor-parallel CUDA kernels (backends/cuda/kernels/tensor_parallel.h),
// checked without a GPU: the block transpose runs on the host through the same index map and
// unit the device kernel uses and must give the CPU kernel's bytes; the narrow copy's Copy2D
// must move the CPU kernel's elements; and the operand checks accept and refuse what the CPU
// kernels accept and refuse.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>
#include <functional>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cuda/kernels/tensor_parallel.h"
#include "core/common/error.h"
#include "tests/unit/kernels_test_support.h"

namespace {

using namespace fullshard;
using namespace fullshard::cuda;
using kt::HT;

// An HT with `pad` leading bytes before its data, so a base address can be misaligned.
struct Shifted {
  HT t;
  size_t pad;
  Shifted(DType dt, Shape s, size_t p)
      : t(dt, {static_cast<int64_t>(TensorMeta{dt, s}.nbytes() + p + 16)}), pad(p) {
    t.meta = TensorMeta{dt, std::move(s)};
  }
  unsigned char* data() { return static_cast<unsigned char*>(t.data()) + pad; }
};

// kTransposeBlocks on the host as block_transpose_kernel runs it: source unit e (of t.unit
// bytes) to destination unit block_transpose_dst(t, e).
void transpose_on_host(const BlockTranspose& t, const unsigned char* src, unsigned char* dst) {
  for (int64_t e = 0; e < block_transpose_numel(t); ++e)
    std::memcpy(dst + block_transpose_dst(t, e) * t.unit, src + e * t.unit,
                static_cast<size_t>(t.unit));
}

RC_GTEST_PROP(CudaTpPlan, BlockTransposeMatchesCpuBytes, ()) {
  const int64_t a = *rc::gen::inRange<int64_t>(1, 6), b = *rc::gen::inRange<int64_t>(1, 6);
  const int64_t inner = *rc::gen::inRange<int64_t>(1, 40);
  const DType dt =
      *rc::gen::element(DType::kFloat32, DType::kBFloat16, DType::kInt64, DType::kUInt8);
  const size_t pin = *rc::gen::element(size_t{0}, size_t{1}, size_t{2}, size_t{4}, size_t{8});
  const size_t pout = *rc::gen::element(size_t{0}, size_t{2}, size_t{8});
  Shifted x(dt, {a, b, inner}, pin), y(dt, {b, a, inner}, pout);
  for (size_t i = 0; i < x.t.meta.nbytes(); ++i)
    x.data()[i] = static_cast<unsigned char>(i * 131 + 7);
  std::memset(y.data(), 0xab, y.t.meta.nbytes());
  HT cpu_out(dt, {b, a, inner});
  const OpCall op = kt::make_call(OpKind::kTransposeBlocks, {&x.t}, {&y.t}, {a, b, inner});
  cpu::run_kernel(op, {x.data()}, {cpu_out.data()});
  const plan::TpPlan p = plan::plan_tensor_parallel(op);
  RC_ASSERT(p.row_bytes == inner * static_cast<int64_t>(dtype_size(dt)));
  const BlockTranspose t = plan::plan_block_transpose(p.a, p.b, p.row_bytes, x.data(), y.data());
  // The widest unit that divides the row and both addresses.
  RC_ASSERT(p.row_bytes % t.unit == 0);
  RC_ASSERT(reinterpret_cast<uintptr_t>(x.data()) % t.unit == 0 &&
            reinterpret_cast<uintptr_t>(y.data()) % t.unit == 0);
  if (t.unit < 16) {
    const int wider = 2 * t.unit;
    RC_ASSERT(p.row_bytes % wider != 0 || reinterpret_cast<uintptr_t>(x.data()) % wider != 0 ||
              reinterpret_cast<uintptr_t>(y.data()) % wider != 0);
  }
  transpose_on_host(t, x.data(), y.data());
  RC_ASSERT(std::memcmp(y.data(), cpu_out.data(), cpu_out.meta.nbytes()) == 0);
}

// The shapes core/model/tensor_parallel.cc issues (gather_seq, scatter_seq, the vocab gather),
// with 16-byte aligned bases: 16-byte units whenever the row allows.
TEST(CudaTpPlan, BlockTransposeUnitsOfTheTpShapes) {
  alignas(16) static unsigned char base[64];
  struct Case {
    int64_t a, b, inner;
    DType dt;
    int unit;
  };
  for (const Case c :
       {Case{2, 8, 32 * 64, DType::kBFloat16, 16}, Case{8, 2, 32 * 64, DType::kFloat32, 16},
        Case{4, 512, 50257, DType::kFloat32, 4}, Case{2, 3, 3, DType::kBFloat16, 2},
        Case{2, 3, 4, DType::kBFloat16, 8}}) {
    const int64_t row = c.inner * static_cast<int64_t>(dtype_size(c.dt));
    EXPECT_EQ(plan::plan_block_transpose(c.a, c.b, row, base, base + 32).unit, c.unit) << c.inner;
    EXPECT_EQ(plan::plan_block_transpose(c.a, c.b, row, base + 2, base).unit, std::min(c.unit, 2))
        << c.inner;
  }
}

// kNarrowCopy: the Copy2D moves element si to di exactly where the CPU kernel does (inputs hold
// their own index, which fp32 keeps exactly), and leaves every other output element alone.
TEST(CudaTpPlan, NarrowCopyMovesTheCpuElements) {
  struct Case {
    int64_t blocks, n, iw, io, ow, oo;
  };
  for (const Case c : {Case{1, 1, 1, 0, 1, 0}, Case{3, 5, 11, 6, 5, 0}, Case{7, 4, 4, 0, 9, 3},
                       Case{2, 64, 128, 64, 64, 0}, Case{5, 3, 8, 2, 10, 7}}) {
    HT x(DType::kFloat32, {c.blocks, c.iw}), cpu_y(DType::kFloat32, {c.blocks, c.ow});
    for (int64_t i = 0; i < x.numel(); ++i) x.set(i, static_cast<double>(i + 1));
    for (int64_t i = 0; i < cpu_y.numel(); ++i) cpu_y.set(i, -1.0);
    HT host_y = cpu_y;
    kt::run(OpKind::kNarrowCopy, {&x}, {&cpu_y}, {c.n, c.iw, c.io, c.ow, c.oo}, {1.0});
    const OpCall op =
        kt::make_call(OpKind::kNarrowCopy, {&x}, {&host_y}, {c.n, c.iw, c.io, c.ow, c.oo}, {1.0});
    const plan::TpPlan p = plan::plan_tensor_parallel(op);
    EXPECT_EQ(p.scale, 1.0);
    for (int64_t e = 0; e < copy2d_numel(p.narrow); ++e) {
      int64_t si, di;
      copy2d_index(p.narrow, e, si, di);
      ASSERT_LT(si, p.narrow.src_limit);
      host_y.set(di, x.get(si));
    }
    EXPECT_EQ(host_y.values(), cpu_y.values()) << c.blocks << " blocks of " << c.n;
  }
}

// Whether running `op` throws, on the CPU kernels (over zeroed host buffers) and in the plan.
struct Verdicts {
  bool cpu, plan;
};
Verdicts verdicts(OpKind k, const std::vector<HT*>& in, const std::vector<HT*>& out,
                  std::vector<int64_t> iargs, std::vector<double> fargs = {}) {
  const OpCall op = kt::make_call(k, in, out, iargs, fargs);
  auto throws = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const InternalError&) {
      return true;
    }
    return false;
  };
  std::vector<void*> pi, po;
  for (HT* t : in) pi.push_back(t->data());
  for (HT* t : out) po.push_back(t->data());
  return {throws([&] { cpu::run_kernel(op, pi, po); }),
          throws([&] { plan::plan_tensor_parallel(op); })};
}

#define EXPECT_SAME_VERDICT(expect_throw, ...)                         \
  do {                                                                 \
    const Verdicts v = verdicts(__VA_ARGS__);                          \
    EXPECT_EQ(v.cpu, expect_throw) << "cpu kernel, line " << __LINE__; \
    EXPECT_EQ(v.plan, expect_throw) << "cuda plan, line " << __LINE__; \
  } while (0)

TEST(CudaTpPlan, OperandChecksMatchTheCpuKernels) {
  const DType f = DType::kFloat32, h = DType::kBFloat16;
  HT x(f, {3, 5}), xb(h, {3, 5}), row(f, {3}), rowb(h, {3}), wrong_row(f, {4}), y(f, {3, 5}),
      yb(h, {3, 5});
  HT t64(DType::kInt64, {3}), t64_4(DType::kInt64, {4}), g(f, {}), big(f, {5, 3});
  HT i64(DType::kInt64, {3, 5}), r64(DType::kInt64, {3});
  // kTransposeBlocks
  EXPECT_SAME_VERDICT(false, OpKind::kTransposeBlocks, {&x}, {&big}, {3, 1, 5});
  EXPECT_SAME_VERDICT(true, OpKind::kTransposeBlocks, {&x}, {&big}, {3, 5});
  EXPECT_SAME_VERDICT(true, OpKind::kTransposeBlocks, {&x}, {&big}, {2, 2, 4});
  EXPECT_SAME_VERDICT(true, OpKind::kTransposeBlocks, {&x}, {&yb}, {3, 1, 5});  // dtypes differ
  EXPECT_SAME_VERDICT(true, OpKind::kTransposeBlocks, {&x, &x}, {&big}, {3, 1, 5});
  // kRowMax, kSumLastDim
  for (OpKind k : {OpKind::kRowMax, OpKind::kSumLastDim}) {
    EXPECT_SAME_VERDICT(false, k, {&x}, {&row}, {5});
    EXPECT_SAME_VERDICT(false, k, {&xb}, {&rowb}, {5}, {0.5});
    EXPECT_SAME_VERDICT(true, k, {&x}, {&row}, {});
    EXPECT_SAME_VERDICT(true, k, {&x}, {&row}, {4});
    EXPECT_SAME_VERDICT(true, k, {&x}, {&row}, {0});
    EXPECT_SAME_VERDICT(true, k, {&x}, {&wrong_row}, {5});
    EXPECT_SAME_VERDICT(true, k, {&i64}, {&r64}, {5});  // not a float tensor
  }
  // kSubRow
  EXPECT_SAME_VERDICT(false, OpKind::kSubRow, {&x, &row}, {&y}, {5});
  EXPECT_SAME_VERDICT(false, OpKind::kSubRow, {&xb, &row}, {&x}, {5});
  EXPECT_SAME_VERDICT(true, OpKind::kSubRow, {&x, &wrong_row}, {&y}, {5});
  EXPECT_SAME_VERDICT(true, OpKind::kSubRow, {&x, &row}, {&row}, {5});
  EXPECT_SAME_VERDICT(true, OpKind::kSubRow, {&x}, {&y}, {5});
  // kExp, kLog
  for (OpKind k : {OpKind::kExp, OpKind::kLog}) {
    EXPECT_SAME_VERDICT(false, k, {&x}, {&yb}, {});
    EXPECT_SAME_VERDICT(true, k, {&x}, {&row}, {});
    EXPECT_SAME_VERDICT(true, k, {&x}, {&y, &y}, {});
  }
  // kNllVocabParallel
  EXPECT_SAME_VERDICT(false, OpKind::kNllVocabParallel, {&x, &t64}, {&row}, {5, 10});
  EXPECT_SAME_VERDICT(true, OpKind::kNllVocabParallel, {&x, &t64}, {&row}, {5});
  EXPECT_SAME_VERDICT(true, OpKind::kNllVocabParallel, {&x, &row}, {&row},
                      {5, 0});  // float targets
  EXPECT_SAME_VERDICT(true, OpKind::kNllVocabParallel, {&x, &t64_4}, {&row}, {5, 0});
  EXPECT_SAME_VERDICT(true, OpKind::kNllVocabParallel, {&x, &t64}, {&wrong_row}, {5, 0});
  // kNllVocabParallelBackward
  EXPECT_SAME_VERDICT(false, OpKind::kNllVocabParallelBackward, {&g, &x, &t64}, {&yb}, {5, 5},
                      {0.25});
  EXPECT_SAME_VERDICT(true, OpKind::kNllVocabParallelBackward, {&g, &x, &t64}, {&y}, {5, 5});
  EXPECT_SAME_VERDICT(true, OpKind::kNllVocabParallelBackward, {&row, &x, &t64}, {&y}, {5, 5},
                      {0.25});
  EXPECT_SAME_VERDICT(true, OpKind::kNllVocabParallelBackward, {&g, &x, &t64_4}, {&y}, {5, 5},
                      {0.25});
  EXPECT_SAME_VERDICT(true, OpKind::kNllVocabParallelBackward, {&g, &x, &t64}, {&row}, {5, 5},
                      {0.25});
  // kNarrowCopy
  EXPECT_SAME_VERDICT(false, OpKind::kNarrowCopy, {&x}, {&row}, {1, 5, 4, 1, 0});
  EXPECT_SAME_VERDICT(false, OpKind::kNarrowCopy, {&x}, {&yb}, {2, 5, 1, 5, 3}, {-1.0});
  EXPECT_SAME_VERDICT(true, OpKind::kNarrowCopy, {&x}, {&row}, {1, 5, 5, 1, 0});
  EXPECT_SAME_VERDICT(true, OpKind::kNarrowCopy, {&x}, {&row}, {2, 5, 0, 1, 0});
  EXPECT_SAME_VERDICT(true, OpKind::kNarrowCopy, {&x}, {&wrong_row}, {1, 5, 0, 1, 0});
  EXPECT_SAME_VERDICT(true, OpKind::kNarrowCopy, {&x}, {&row}, {1, 5, 0, 1});
}

// Where the device kernels must be stricter than the CPU loops (a device kernel cannot check
// as it goes, and must not touch memory outside its operands).
TEST(CudaTpPlan, StricterChecksThanTheCpuKernels) {
  HT x(DType::kFloat32, {3, 5}), y(DType::kFloat32, {3, 5}), g(DType::kFloat32, {}),
      tf(DType::kFloat32, {3});
  EXPECT_THROW(plan::plan_tensor_parallel(kt::make_call(OpKind::kNllVocabParallelBackward,
                                                        {&g, &x, &tf}, {&y}, {5, 0}, {1.0})),
               InternalError);  // targets must be int64
  HT row(DType::kFloat32, {3});
  EXPECT_THROW(plan::plan_tensor_parallel(
                   kt::make_call(OpKind::kNarrowCopy, {&x}, {&row}, {1, 5, -1, 1, 0})),
               InternalError);  // negative offset
  // Async TP's fused collective-matmuls are not tensor_parallel.cu's (which kinds have a kernel:
  // cuda_kernels.coverage's HasKernelAgreesWithTheDispatcher).
  EXPECT_THROW(plan::plan_tensor_parallel(kt::make_call(OpKind::kAllGatherMatmul, {&x}, {&y})),
               InternalError);
}

// The decoded arguments: rows, width, the shard's vocab start and the factors.
TEST(CudaTpPlan, DecodedArguments) {
  HT lp(DType::kFloat32, {2, 3, 8}), t(DType::kInt64, {6}), y(DType::kFloat32, {6}),
      g(DType::kBFloat16, {});
  HT gl(DType::kFloat32, {2, 3, 8}), s(DType::kFloat32, {6});
  plan::TpPlan p = plan::plan_tensor_parallel(
      kt::make_call(OpKind::kNllVocabParallel, {&lp, &t}, {&y}, {8, 16}));
  EXPECT_EQ(p.rows, 6);
  EXPECT_EQ(p.dim, 8);
  EXPECT_EQ(p.start, 16);
  p = plan::plan_tensor_parallel(
      kt::make_call(OpKind::kNllVocabParallelBackward, {&g, &lp, &t}, {&gl}, {8, 24}, {1.0 / 6}));
  EXPECT_EQ(p.start, 24);
  EXPECT_EQ(p.scale, 1.0 / 6);
  p = plan::plan_tensor_parallel(kt::make_call(OpKind::kSumLastDim, {&lp}, {&s}, {8}));
  EXPECT_EQ(p.scale, 1.0);  // no fargs: a plain sum
  p = plan::plan_tensor_parallel(kt::make_call(OpKind::kSumLastDim, {&lp}, {&s}, {8}, {0.125}));
  EXPECT_EQ(p.scale, 0.125);
  HT flat(DType::kFloat32, {48});
  p = plan::plan_tensor_parallel(kt::make_call(OpKind::kExp, {&lp}, {&flat}));
  EXPECT_EQ(p.numel, 48);
}

}  // namespace
