// CPU kernels: fill, copy (cast / foreach / row concat), add, scale, SiLU, GELU, mul,
// embedding and position embedding. Forwards against double-precision references (exactly,
// bit for bit, where fp32 math is order-independent: casts, add, mul, scale, gathers);
// backwards against central finite differences of sum(w * f(x)) over the double reference
// (h = 1e-5; the fp32 kernels then agree to ~1e-5 relative).
#include "core/runtime/op_table.h"
#include "tests/unit/kernels_test_support.h"

using namespace kt;

namespace {

const DType kFloatTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

// Expected storage of fp32 value f in dtype dt, as raw bits.
uint32_t expected_bits(DType dt, float f) {
  switch (dt) {
    case DType::kBFloat16: return float_to_bf16(f);
    case DType::kFloat16: return float_to_fp16(f);
    default: return std::bit_cast<uint32_t>(f);
  }
}
uint32_t stored_bits(const HT& t, int64_t i) {
  return t.meta.dtype == DType::kFloat32 ? t.bits32(i) : t.bits16(i);
}

double silu_ref(double x) { return x / (1 + std::exp(-x)); }
double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

}  // namespace

// ------------------------------------------------------------------ fill
TEST(KernelsFill, ZeroByDefaultAndValueFromFargs) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt64}) {
    HT t(dt, {3, 5});
    for (auto& w : t.mem) w = ~0ull;  // garbage
    run(OpKind::kFill, {}, {&t});
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.get(i), 0.0) << dtype_str(dt);
  }
  HT b(DType::kBFloat16, {7});
  run(OpKind::kFill, {}, {&b}, {}, {0.25});
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(b.bits16(i), 0x3E80);
  HT h(DType::kFloat16, {4});
  run(OpKind::kFill, {}, {&h}, {}, {1.0});
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(h.bits16(i), 0x3C00);
  HT f(DType::kFloat32, {});  // a scalar (the loss seed)
  run(OpKind::kFill, {}, {&f}, {}, {0.5});
  EXPECT_EQ(f.get(0), 0.5);
  // A larger-than-one-chunk tensor.
  HT big(DType::kFloat32, {5000});
  run(OpKind::kFill, {}, {&big}, {}, {-3.0});
  for (int64_t i = 0; i < big.numel(); ++i) ASSERT_EQ(big.get(i), -3.0);
}

// ------------------------------------------------------------------ copy
TEST(KernelsCopy, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0); 1 + 3*2^-8 is
  // halfway between 1.0078125 and 1.015625: ties to even (1.015625, mantissa ...10).
  HT src = from_values(DType::kFloat32, {4}, {1.00390625, 1.01171875, -1.00390625, 1.0039064});
  HT dst(DType::kBFloat16, {4});
  run(OpKind::kCopy, {&src}, {&dst});
  EXPECT_EQ(dst.bits16(0), 0x3F80);
  EXPECT_EQ(dst.bits16(1), 0x3F82);
  EXPECT_EQ(dst.bits16(2), 0xBF80);
  EXPECT_EQ(dst.bits16(3), 0x3F81);  // just above the tie: rounds up
}

RC_GTEST_PROP(KernelsCopy, CastMatchesFloatConvertExactly, ()) {
  const DType sd = *gen_float_dtype(), dd = *gen_float_dtype();
  const int n = *rc::gen::inRange(1, 5000);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT src = random_tensor(sd, {n}, rng, -70000, 70000);  // beyond fp16's range too
  HT dst(dd, {n});
  run(OpKind::kCopy, {&src}, {&dst});
  for (int64_t i = 0; i < n; ++i)
    RC_ASSERT(stored_bits(dst, i) == expected_bits(dd, static_cast<float>(src.get(i))));
}

TEST(KernelsCopy, ForeachPairsAndRowConcat) {
  // Foreach form: out[k] = in[k] with a cast per pair.
  HT a = from_values(DType::kFloat32, {3}, {1, 2, 3}),
     b = from_values(DType::kFloat32, {2}, {4.5, -5});
  HT oa(DType::kBFloat16, {3}), ob(DType::kFloat32, {2});
  run(OpKind::kCopy, {&a, &b}, {&oa, &ob});
  EXPECT_EQ(oa.values(), (Vec{1, 2, 3}));
  EXPECT_EQ(ob.values(), (Vec{4.5, -5}));
  // Row concat (SplitWithSizesBackward's cat): rows = 2, inputs [2,1], [2,2], [2,3].
  HT q = from_values(DType::kBFloat16, {2, 1}, {1, 2});
  HT k = from_values(DType::kBFloat16, {2, 2}, {3, 4, 5, 6});
  HT v = from_values(DType::kBFloat16, {2, 3}, {7, 8, 9, 10, 11, 12});
  HT out(DType::kBFloat16, {2, 6});
  run(OpKind::kCopy, {&q, &k, &v}, {&out}, {2});
  EXPECT_EQ(out.values(), (Vec{1, 3, 4, 7, 8, 9, 2, 5, 6, 10, 11, 12}));
  // Int64 copies bit for bit.
  HT ids = from_values(DType::kInt64, {2}, {123456789, -7}), ids2(DType::kInt64, {2});
  run(OpKind::kCopy, {&ids}, {&ids2});
  EXPECT_EQ(ids2.values(), (Vec{123456789, -7}));
  // Size mismatch is a contract violation.
  HT wrong(DType::kFloat32, {4});
  EXPECT_THROW(run(OpKind::kCopy, {&a}, {&wrong}), InternalError);
}

// ------------------------------------------------------------------ add / scale / mul
RC_GTEST_PROP(KernelsAdd, MixedDtypesRoundOnceExactly, ()) {
  const DType da = *gen_float_dtype(), db = *gen_float_dtype(), dout = *gen_float_dtype();
  const int n = *rc::gen::inRange(1, 3000);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT a = random_tensor(da, {n}, rng, -100, 100), b = random_tensor(db, {n}, rng, -100, 100),
     o(dout, {n});
  run(OpKind::kAdd, {&a, &b}, {&o});
  for (int64_t i = 0; i < n; ++i)
    RC_ASSERT(stored_bits(o, i) ==
              expected_bits(dout, static_cast<float>(a.get(i)) + static_cast<float>(b.get(i))));
  // In place (out aliases a): the accumulation form add_into uses.
  if (da == dout) {
    const Vec before = a.values();
    run(OpKind::kAdd, {&a, &b}, {&a});
    for (int64_t i = 0; i < n; ++i)
      RC_ASSERT(stored_bits(a, i) ==
                expected_bits(da, static_cast<float>(before[i]) + static_cast<float>(b.get(i))));
  }
}

RC_GTEST_PROP(KernelsScaleMul, ExactInFp32ThenRounded, ()) {
  const DType dt = *gen_float_dtype();
  const int n = *rc::gen::inRange(1, 3000);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT a = random_tensor(dt, {n}, rng, -10, 10), b = random_tensor(dt, {n}, rng, -10, 10), o(dt, {n});
  run(OpKind::kMul, {&a, &b}, {&o});
  for (int64_t i = 0; i < n; ++i)
    RC_ASSERT(stored_bits(o, i) ==
              expected_bits(dt, static_cast<float>(a.get(i)) * static_cast<float>(b.get(i))));
  const double f = 0.37;
  const Vec before = a.values();
  run(OpKind::kScale, {&a}, {&a}, {}, {f});  // in place, as the predivide
  for (int64_t i = 0; i < n; ++i)
    RC_ASSERT(stored_bits(a, i) ==
              expected_bits(dt, static_cast<float>(before[i]) * static_cast<float>(f)));
}

TEST(KernelsMul, BackwardFormsMatchFiniteDifferences) {
  std::mt19937 rng(7);
  const int n = 37;
  HT a = random_tensor(DType::kFloat32, {n}, rng), b = random_tensor(DType::kFloat32, {n}, rng);
  HT g = random_tensor(DType::kFloat32, {n}, rng);
  const Vec av = a.values(), bv = b.values(), w = g.values();
  auto f_a = [&](const Vec& x) {
    Vec y(n);
    for (int i = 0; i < n; ++i) y[i] = x[i] * bv[i];
    return y;
  };
  auto f_b = [&](const Vec& x) {
    Vec y(n);
    for (int i = 0; i < n; ++i) y[i] = av[i] * x[i];
    return y;
  };
  const Vec ea = fd_grad(f_a, av, w), eb = fd_grad(f_b, bv, w);
  // The model's form: kMul(grad, other) per input.
  HT ga(DType::kFloat32, {n}), gb(DType::kFloat32, {n});
  run(OpKind::kMul, {&g, &b}, {&ga});
  run(OpKind::kMul, {&g, &a}, {&gb});
  KT_EXPECT_CLOSE(ga.values(), ea, 1e-6, 1e-5);
  KT_EXPECT_CLOSE(gb.values(), eb, 1e-6, 1e-5);
  // The fused kMulBackward form: (g, a, b) -> (grad_a, grad_b).
  HT ga2(DType::kFloat32, {n}), gb2(DType::kFloat32, {n});
  run(OpKind::kMulBackward, {&g, &a, &b}, {&ga2, &gb2});
  EXPECT_EQ(ga2.values(), ga.values());
  EXPECT_EQ(gb2.values(), gb.values());
}

// ------------------------------------------------------------------ SiLU / GELU
RC_GTEST_PROP(KernelsActivation, ForwardAndBackwardMatchReference, ()) {
  const bool is_gelu = *rc::gen::arbitrary<bool>();
  const DType dt = *gen_float_dtype();
  const int n = *rc::gen::inRange(1, 200);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(dt, {n}, rng, -6, 6), y(dt, {n});
  auto ref = is_gelu ? gelu_ref : silu_ref;
  run(is_gelu ? OpKind::kGELU : OpKind::kSiLU, {&x}, {&y});
  Vec e(n);
  for (int i = 0; i < n; ++i) e[i] = ref(x.get(i));
  // One rounding to the output dtype (plus fp32 math error).
  KT_RC_CLOSE(y.values(), e, 1e-6, rel_eps(dt) + 2e-6);
  // Backward: grad_x = g * f'(x), against finite differences of sum(g * f(x)).
  HT g = random_tensor(dt, {n}, rng), gx(dt, {n});
  run(is_gelu ? OpKind::kGELUBackward : OpKind::kSiLUBackward, {&g, &x}, {&gx});
  auto f = [&](const Vec& v) {
    Vec o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = ref(v[i]);
    return o;
  };
  KT_RC_CLOSE(gx.values(), fd_grad(f, x.values(), g.values()), 2e-6, rel_eps(dt) + 1e-5);
}

TEST(KernelsActivation, KnownValues) {
  HT x = from_values(DType::kFloat32, {3}, {0, 1, -2}), y(DType::kFloat32, {3});
  run(OpKind::kSiLU, {&x}, {&y});
  EXPECT_NEAR(y.get(0), 0.0, 1e-7);
  EXPECT_NEAR(y.get(1), 0.7310585786, 1e-6);
  EXPECT_NEAR(y.get(2), -0.2384058440, 1e-6);
  run(OpKind::kGELU, {&x}, {&y});
  EXPECT_NEAR(y.get(1), 0.8411919906, 1e-6);  // torch.nn.functional.gelu(1, approximate='tanh')
  EXPECT_NEAR(y.get(2), -0.0454022884, 1e-6);
}

// ------------------------------------------------------------------ embedding
RC_GTEST_PROP(KernelsEmbedding, GatherIsExactAndBackwardScatterAdds, ()) {
  const DType dt = *gen_float_dtype();
  const int V = *rc::gen::inRange(1, 20), D = *rc::gen::inRange(1, 9);
  const int B = *rc::gen::inRange(1, 4), S = *rc::gen::inRange(1, 9);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT w = random_tensor(dt, {V, D}, rng), ids(DType::kInt64, {B, S});
  std::uniform_int_distribution<int> pick(0, V - 1);
  for (int i = 0; i < B * S; ++i) ids.set(i, pick(rng));  // duplicates likely
  HT y(dt, {B, S, D});
  run(OpKind::kEmbedding, {&ids, &w}, {&y});
  for (int t = 0; t < B * S; ++t)
    for (int d = 0; d < D; ++d)
      RC_ASSERT(y.get(t * D + d) == w.get(static_cast<int64_t>(ids.get(t)) * D + d));
  // Backward: grad_w = scatter-add of g rows (rows of unused ids are 0), vs finite differences.
  HT g = random_tensor(dt, {B, S, D}, rng), gw(dt, {V, D});
  for (auto& m : gw.mem) m = ~0ull;  // must be fully overwritten
  run(OpKind::kEmbeddingBackward, {&g, &ids}, {&gw});
  const Vec idv = ids.values();
  auto f = [&](const Vec& wv) {
    Vec o(static_cast<size_t>(B * S * D));
    for (int t = 0; t < B * S; ++t)
      for (int d = 0; d < D; ++d) o[t * D + d] = wv[static_cast<size_t>(idv[t]) * D + d];
    return o;
  };
  KT_RC_CLOSE(gw.values(), fd_grad(f, w.values(), g.values()), 1e-6, rel_eps(dt) + 1e-6);
}

TEST(KernelsEmbedding, OutOfRangeIdThrows) {
  HT w(DType::kFloat32, {4, 2}), ids = from_values(DType::kInt64, {1, 2}, {1, 4}),
                                 y(DType::kFloat32, {1, 2, 2});
  EXPECT_THROW(run(OpKind::kEmbedding, {&ids, &w}, {&y}), InternalError);
}

RC_GTEST_PROP(KernelsPositionEmbedding, AddsRowsAndBackwardSumsOverBatch, ()) {
  const DType dt = *gen_float_dtype();
  const int B = *rc::gen::inRange(1, 4), S = *rc::gen::inRange(1, 8), D = *rc::gen::inRange(1, 9);
  const int P = S + *rc::gen::inRange(0, 4);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(dt, {B, S, D}, rng), wpe = random_tensor(dt, {P, D}, rng), y(dt, {B, S, D});
  run(OpKind::kPositionEmbedding, {&x, &wpe}, {&y});
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int d = 0; d < D; ++d) {
        const int64_t i = (b * S + s) * D + d;
        RC_ASSERT(stored_bits(y, i) ==
                  expected_bits(
                      dt, static_cast<float>(x.get(i)) + static_cast<float>(wpe.get(s * D + d))));
      }
  HT g = random_tensor(dt, {B, S, D}, rng), gw(dt, {P, D});
  for (auto& m : gw.mem) m = ~0ull;
  run(OpKind::kPositionEmbeddingBackward, {&g}, {&gw});
  const Vec xv = x.values();
  auto f = [&](const Vec& wv) {
    Vec o(xv.size());
    for (int b = 0; b < B; ++b)
      for (int s = 0; s < S; ++s)
        for (int d = 0; d < D; ++d)
          o[(b * S + s) * D + d] = xv[(b * S + s) * D + d] + wv[s * D + d];
    return o;
  };
  KT_RC_CLOSE(gw.values(), fd_grad(f, wpe.values(), g.values()), 1e-6, rel_eps(dt) + 1e-6);
  for (int s = S; s < P; ++s)
    for (int d = 0; d < D; ++d) RC_ASSERT(gw.get(s * D + d) == 0.0);
}

TEST(KernelsDispatch, HasKernelForEveryKindButBackendOwnedOnes) {
  EXPECT_FALSE(cpu::has_kernel(OpKind::kLoadBatch));
  EXPECT_FALSE(cpu::has_kernel(OpKind::kInitParam));
  for (OpKind k :
       {OpKind::kFill, OpKind::kCopy, OpKind::kAttention, OpKind::kAttentionBackward,
        OpKind::kAdamW, OpKind::kChunkCat, OpKind::kNllLossBackward, OpKind::kMulBackward})
    EXPECT_TRUE(cpu::has_kernel(k)) << op_kind_name(k);
  HT t(DType::kInt64, {2, 2});
  EXPECT_THROW(run(OpKind::kLoadBatch, {}, {&t}), InternalError);
  // Address count must match the op's tensor count.
  OpCall op = make_call(OpKind::kFill, {}, {&t});
  EXPECT_THROW(cpu::run_kernel(op, {}, {}), InternalError);
}

// The dispatch switch ends in `default`, so the compiler no longer lists a kind without a case:
// every kind the table gives a device kernel must reach one (its decoder refuses the empty op,
// naming it) and never the fall-through. (The simulator-only kinds are refused before any queue:
// BackendCore.SimulatedOnlyKindsAreRefusedBeforeTheQueue.)
TEST(KernelsDispatch, EveryDeviceKindReachesItsKernel) {
  int reached = 0;
  for (size_t i = 0; i < kOpKindCount; ++i) {
    const auto k = static_cast<OpKind>(i);
    if (!has_device_kernel(k)) continue;
    OpCall op;
    op.kind = k;
    op.name = "empty";
    try {
      cpu::run_kernel(op, {}, {});
      ADD_FAILURE() << op_kind_name(k) << " ran without operands";
    } catch (const InternalError& e) {
      EXPECT_EQ(std::string(e.what()).find("no CPU kernel"), std::string::npos)
          << op_kind_name(k) << ": " << e.what();
      ++reached;
    }
  }
  EXPECT_GT(reached, 60);
}
