// Host-only (no GPU): the CUDA backend's mixture-of-experts kinds as far as the host decides them
// (backends/cuda/kernels/moe_plan.h, moe_index.h, moe_dispatch.cc): cuda::has_kernel lists every
// MoE kind; the index maps the kernels run (the permutation entry, top-k's order, the argsort
// position, floor division, negative rows, the grouped GEMMs' tiles) give, executed here, what
// the CPU kernels give; the plans decode core's arguments and refuse what a kernel cannot run.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "backends/common/kernel_families.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/kernels/moe_index.h"
#include "backends/cuda/kernels/moe_plan.h"
#include "core/runtime/op_table.h"
#include "tests/unit/kernels_test_support.h"

namespace fullshard::cuda {
namespace {

using kt::HT;

HT index_tensor(const std::vector<int64_t>& v) {
  HT t(DType::kInt64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.set(static_cast<int64_t>(i), static_cast<double>(v[i]));
  return t;
}

std::string refusal(const OpCall& op, std::vector<void*> in = {}, std::vector<void*> out = {}) {
  in.resize(op.inputs.size(), reinterpret_cast<void*>(uintptr_t{256}));
  out.resize(op.outputs.size(), reinterpret_cast<void*>(uintptr_t{512}));
  try {
    plan_moe(op, in, out);
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
}

TEST(CudaMoePlan, HasKernelListsEveryMoeKind) {
  int n = 0;
  for (size_t k = 0; k < kOpKindCount; ++k) {
    const auto kind = static_cast<OpKind>(k);
    if (!backends::is_moe_kind(kind)) continue;
    EXPECT_TRUE(cuda::has_kernel(kind)) << op_kind_name(kind);
    // launch_kernel reaches the MoE decoder (an op without operands is refused there, by name),
    // not the dispatcher's "no CUDA kernel".
    OpCall op;
    op.kind = kind;
    op.name = "probe";
    std::string message;
    try {
      launch_moe(op, {}, {}, KernelContext{});
    } catch (const InternalError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("probe"), std::string::npos) << op_kind_name(kind) << ": " << message;
    EXPECT_EQ(message.find("no CUDA kernel"), std::string::npos) << message;
    ++n;
  }
  EXPECT_EQ(n, 22);  // with kExpertCapacity
  EXPECT_TRUE(cuda::has_kernel(OpKind::kSdpaMerge));  // context parallelism too (context_parallel.cu)
}

// generate_permute_indices: moe_permute_entry over the starts and ends the kernel stages, for
// every entry, equals the CPU kernel's permutation and offsets (ep senders, empty experts).
RC_GTEST_PROP(CudaMoePlan, PermuteEntryEqualsCpuKernel, ()) {
  const int E = *rc::gen::inRange(1, 9), align = *rc::gen::element(1, 2, 8, 16);
  const int ranks = *rc::gen::element(1, 2, 4), T = *rc::gen::inRange(0, 60);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  std::vector<int64_t> c(static_cast<size_t>(ranks * E), 0);
  std::uniform_int_distribution<int> u(0, ranks * E - 1);
  for (int t = 0; t < T; ++t) ++c[u(rng)];
  HT counts(DType::kFloat32, {ranks * E});
  for (int i = 0; i < ranks * E; ++i) counts.set(i, static_cast<double>(c[i]));
  const int64_t P = (T + E * align + align - 1) / align * align;
  HT perm(DType::kInt64, {P}), offs(DType::kInt64, {E});
  kt::run(OpKind::kPermuteIndices, {&counts}, {&perm, &offs}, {T, E, align});
  // What permute_indices_kernel's thread 0 stages.
  std::vector<int64_t> start(c.size()), ends(static_cast<size_t>(E));
  int64_t total = 0, end = 0;
  for (size_t i = 0; i < c.size(); ++i) start[i] = total, total += c[i];
  for (int e = 0; e < E; ++e) {
    int64_t sum = 0;
    for (int r = 0; r < ranks; ++r) sum += c[r * E + e];
    ends[e] = end = moe_group_end(end, sum, align);
    RC_ASSERT(static_cast<int64_t>(offs.get(e)) == ends[e]);
  }
  for (int64_t p = 0; p < P; ++p)
    RC_ASSERT(moe_permute_entry(p, c.data(), start.data(), ends.data(), E, ranks) ==
              static_cast<int64_t>(perm.get(p)));
}

// top-k by repeated picks in moe_topk_before's order equals the CPU's stable sort (ties, NaN).
RC_GTEST_PROP(CudaMoePlan, TopKOrderEqualsCpuKernel, ()) {
  const int N = *rc::gen::inRange(1, 6), E = *rc::gen::inRange(1, 20);
  const int K = *rc::gen::inRange(1, E + 1);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  std::uniform_int_distribution<int> u(0, 5);
  HT s(DType::kFloat32, {N, E}), v(DType::kFloat32, {N, K}), idx(DType::kInt64, {N, K});
  for (int i = 0; i < N * E; ++i) s.set(i, u(rng) == 5 ? NAN : 0.5 * u(rng) - 1.0);
  kt::run(OpKind::kTopK, {&s}, {&v, &idx}, {N, E, K});
  for (int n = 0; n < N; ++n) {
    float pv = 0;
    int64_t pi = -1;
    for (int k = 0; k < K; ++k) {  // topk_kernel's loop
      float bv = 0;
      int64_t bi = -1;
      for (int64_t e = 0; e < E; ++e) {
        const auto x = static_cast<float>(s.get(n * E + e));
        if (pi >= 0 && !moe_topk_before(pv, pi, x, e)) continue;
        if (bi < 0 || moe_topk_before(x, e, bv, bi)) bv = x, bi = e;
      }
      RC_ASSERT(bi == static_cast<int64_t>(idx.get(n * K + k)));
      pv = bv, pi = bi;
    }
  }
}

// The argsort position (keys below + equal keys before), floor division and negative rows.
RC_GTEST_PROP(CudaMoePlan, ArgsortFloorDivideAndRowsEqualCpuKernels, ()) {
  const int n = *rc::gen::inRange(0, 50);
  const int64_t div = *rc::gen::inRange(1, 6);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  std::uniform_int_distribution<int> u(-3, 4);
  std::vector<int64_t> keys(static_cast<size_t>(n));
  for (auto& k : keys) k = u(rng);
  HT x = index_tensor(keys), order(DType::kInt64, {n}), q(DType::kInt64, {n});
  kt::run(OpKind::kArgsort, {&x}, {&order}, {n, 1, 1});
  kt::run(OpKind::kFloorDivide, {&x}, {&q}, {n, 1, div});
  std::vector<int64_t> ours(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    int64_t less = 0, eq = 0;
    for (int j = 0; j < n; ++j) less += keys[j] < keys[i], eq += keys[j] == keys[i] && j < i;
    ours[moe_argsort_position(less, eq)] = i;
    RC_ASSERT(moe_floor_div(keys[i], div) == static_cast<int64_t>(q.get(i)));
  }
  for (int i = 0; i < n; ++i) RC_ASSERT(ours[i] == static_cast<int64_t>(order.get(i)));
  RC_ASSERT(moe_row_of(-1, 5) == 4);
  RC_ASSERT(moe_row_of(4, 5) == 4);
  RC_ASSERT(moe_row_of(5, 5) == -1);
  RC_ASSERT(moe_row_of(-6, 5) == -1);
}

// NOTE [Grouped GEMM tiles] (backends/cuda/kernels/moe_index.h): the tiles cover every group's
// rows once, in order, never past the group or the rows, within the grid's bound; bad offsets
// (decreasing, past the rows) clamp.
RC_GTEST_PROP(CudaMoePlan, GroupedTilesCoverEachGroupOnce, ()) {
  const int E = *rc::gen::inRange(1, 9), rows = *rc::gen::inRange(0, 300);
  const int tile = *rc::gen::element(1, 16, 64);
  const bool valid = *rc::gen::arbitrary<bool>();
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  std::uniform_int_distribution<int> u(valid ? 0 : -5, rows + (valid ? 0 : 20));
  std::vector<int64_t> offs(static_cast<size_t>(E));
  for (auto& o : offs) o = u(rng);
  if (valid) std::sort(offs.begin(), offs.end());
  std::vector<int> owner(static_cast<size_t>(rows), -1);
  const int64_t max_tiles = moe_grouped_max_tiles(rows, E, tile);
  int64_t found = 0;
  for (int64_t t = 0; t < max_tiles + 3; ++t) {
    int64_t g = 0, r0 = 0, r1 = 0;
    if (!moe_grouped_tile(t, offs.data(), E, rows, tile, g, r0, r1)) continue;
    RC_ASSERT(t < max_tiles);
    RC_ASSERT(r0 < r1 && r1 - r0 <= tile && r1 <= rows);
    for (int64_t r = r0; r < r1; ++r) {
      RC_ASSERT(owner[r] == -1);
      owner[r] = static_cast<int>(g);
    }
    ++found;
  }
  int64_t begin = 0;
  for (int e = 0; e < E; ++e) {
    const int64_t end = moe_group_bound(offs.data(), e, begin, rows);
    if (valid) RC_ASSERT(end == offs[e]);
    for (int64_t r = begin; r < end; ++r) RC_ASSERT(owner[r] == e);
    begin = end;
  }
  for (int64_t r = begin; r < rows; ++r) RC_ASSERT(owner[r] == -1);  // zeros: the tail kernel
  RC_ASSERT(found <= max_tiles);
}

OpCall moe_op(OpKind k, std::vector<TensorRef> in, std::vector<TensorRef> out,
              std::vector<int64_t> iargs) {
  OpCall op;
  op.kind = k;
  op.name = "layers.1.moe probe";
  op.inputs = std::move(in);
  op.outputs = std::move(out);
  op.iargs = std::move(iargs);
  return op;
}
TensorRef ref(DType d, Shape s) {
  TensorRef r;
  r.meta = {d, std::move(s)};
  return r;
}

TEST(CudaMoePlan, PlansDecodeCoreArgumentsAndRefuseWhatNoKernelRuns) {
  const DType f32 = DType::kFloat32, bf16 = DType::kBFloat16, i64 = DType::kInt64;
  // The weighted sum's D comes from the operands, as the CPU kernel takes it.
  const OpCall ws = moe_op(OpKind::kWeightedSum, {ref(f32, {6, 2}), ref(bf16, {6, 2, 40})},
                           {ref(bf16, {6, 40})}, {6, 4, 2});
  const MoePlan p = plan_moe(ws, {nullptr, nullptr}, {nullptr});
  EXPECT_EQ(p.dim, 40);
  EXPECT_EQ(p.d_in[1], kBF16);
  EXPECT_EQ(p.d_out[0], kBF16);
  // An integer where a kernel loads floats: refused by name before any launch.
  const OpCall soft = moe_op(OpKind::kSoftmax, {ref(i64, {3, 4})}, {ref(f32, {3, 4})}, {3, 4, 0});
  EXPECT_NE(refusal(soft).find("layers.1.moe probe"), std::string::npos);
  EXPECT_NE(refusal(soft).find("int64"), std::string::npos);
  // The histogram's counts and the permutation's staging live in shared memory.
  const OpCall hist = moe_op(OpKind::kHistogram, {ref(i64, {2, 1})}, {ref(f32, {20000})},
                             {2, 20000, 1});
  EXPECT_NE(refusal(hist).find("shared memory"), std::string::npos);
  const OpCall perm = moe_op(OpKind::kPermuteIndices, {ref(f32, {4 * 1024})},
                             {ref(i64, {1024 * 8 + 64}), ref(i64, {1024})}, {64, 1024, 8});
  EXPECT_NE(refusal(perm).find("shared memory"), std::string::npos);
  const OpCall perm_ok = moe_op(OpKind::kPermuteIndices, {ref(f32, {8 * 128})},
                                {ref(i64, {128 * 8 + 4096}), ref(i64, {128})}, {4096, 128, 8});
  EXPECT_EQ(refusal(perm_ok), "");
  // Core's decode runs first: a size that does not match is core's message.
  const OpCall bad = moe_op(OpKind::kGroupedMM, {ref(f32, {8, 4}), ref(f32, {2, 3, 4}), ref(i64, {2})},
                            {ref(f32, {8, 5})}, {8, 4, 3, 2, 8});
  EXPECT_NE(refusal(bad).find("operand sizes do not match"), std::string::npos);
}

TEST(CudaMoePlan, RowCopiesTakeTheWidestAccessAndScatterUsesSlots) {
  auto at = [](uintptr_t a) { return reinterpret_cast<void*>(a); };
  EXPECT_EQ(moe_copy_unit(4096 * 2, at(1024), at(2048)), 16);
  EXPECT_EQ(moe_copy_unit(6, at(1024), at(2048)), 2);
  EXPECT_EQ(moe_copy_unit(24, at(1032), at(2048)), 8);
  EXPECT_EQ(moe_copy_unit(8, at(1025), at(2048)), 1);
  const DType bf16 = DType::kBFloat16, i64 = DType::kInt64;
  const OpCall wide = moe_op(OpKind::kScatterRows, {ref(bf16, {5, 64}), ref(i64, {5})},
                             {ref(bf16, {6, 64})}, {6, 64, 1});
  const MoePlan w = plan_moe(wide, {at(256), at(512)}, {at(1024)});
  EXPECT_TRUE(w.slots);
  EXPECT_EQ(w.row_bytes, 128);
  EXPECT_EQ(w.unit, 16);
  // A bf16 row of one element (2 bytes) has no room for the 4-byte slot: in index order.
  const OpCall narrow = moe_op(OpKind::kScatterRows, {ref(bf16, {5, 1}), ref(i64, {5})},
                               {ref(bf16, {6, 1})}, {6, 1, 1});
  EXPECT_FALSE(plan_moe(narrow, {at(256), at(512)}, {at(1024)}).slots);
}

}  // namespace
}  // namespace fullshard::cuda
