// The CPU's float8 kernels (backends/cpu/kernels/float8.cc, NOTE [Float8 on the CPU]) bit for
// bit against torchao 0.18 on torch 2.11: tests/data/oracle/float8_kernels.json, written by
// tools/oracle/float8_kernels.py.
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/runtime/float8_args.h"
#include "core/runtime/op_table.h"
#include "tests/unit/kernels_test_support.h"

namespace {

using namespace kt;
using fullshard::DType;
using fullshard::Float8CastArgs;
using fullshard::OpKind;
using fullshard::ScaledMmArgs;

const nlohmann::json& oracle() {
  static const nlohmann::json doc = [] {
    std::ifstream in(std::string(FULLSHARD_SOURCE_DIR) + "/tests/data/oracle/float8_kernels.json");
    EXPECT_TRUE(in) << "missing tests/data/oracle/float8_kernels.json";
    return nlohmann::json::parse(in);
  }();
  return doc;
}

DType dtype_of(const std::string& s) {
  if (s == "fp32") return DType::kFloat32;
  if (s == "bf16") return DType::kBFloat16;
  if (s == "e5m2") return DType::kFloat8E5M2;
  return DType::kFloat8E4M3FN;
}

// Writes the oracle's bit patterns (one per element, the dtype's width) into t.
void put_bits(HT& t, const nlohmann::json& v) {
  const size_t w = fullshard::dtype_size(t.meta.dtype);
  ASSERT_EQ(v.size(), static_cast<size_t>(t.numel()));
  auto* p = reinterpret_cast<unsigned char*>(t.data());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t b = static_cast<uint32_t>(v[i].get<int64_t>());
    std::memcpy(p + i * w, &b, w);  // little-endian: the low bytes
  }
}

std::vector<uint32_t> get_bits(const HT& t) {
  const size_t w = fullshard::dtype_size(t.meta.dtype);
  const auto* p = reinterpret_cast<const unsigned char*>(t.data());
  std::vector<uint32_t> out(static_cast<size_t>(t.numel()), 0);
  for (size_t i = 0; i < out.size(); ++i) std::memcpy(&out[i], p + i * w, w);
  return out;
}

std::vector<uint32_t> want_bits(const nlohmann::json& v) {
  std::vector<uint32_t> out;
  for (const auto& b : v) out.push_back(static_cast<uint32_t>(b.get<int64_t>()));
  return out;
}

std::string case_name(const nlohmann::json& c) { return c.dump().substr(0, 120); }

// Every cast case, run as the simulator records it eager (abs, amax, the scale's 5 or 8 kernels,
// .to(fp32), * scale, clamp, .to(float8)) and compiled (an amax kernel and one cast kernel): the
// amax, the scale and every float8 code equal torchao's.
TEST(KernelsFloat8, CastsMatchTorchaoBitForBit) {
  const auto& casts = oracle().at("casts");
  ASSERT_EQ(casts.size(), 96u);
  for (const auto& c : casts) {
    SCOPED_TRACE(case_name(c));
    Float8CastArgs a;
    a.granularity = c.at("granularity") == "tensorwise" ? 0 : 1;
    a.axis = c.at("axis").get<int64_t>();
    a.rows = c.at("rows").get<int64_t>();
    a.cols = c.at("cols").get<int64_t>();
    const DType target = dtype_of(c.at("target"));
    a.target = target == DType::kFloat8E5M2 ? 1 : 0;
    a.pow2 = c.at("pow2").get<bool>() ? 1 : 0;
    const int64_t s = a.scale_numel(), R = a.rows, C = a.cols;
    const DType xd = dtype_of(c.at("dtype"));
    HT x(xd, {R, C});
    put_bits(x, c.at("x"));
    auto args = [&](int64_t step) {
      Float8CastArgs b = a;
      b.step = step;
      OpCall op;
      b.encode(op);
      return op.iargs;
    };
    // eager
    HT abs(xd, {R, C}), amax(xd, {s}), scale(DType::kFloat32, {s});
    run(OpKind::kFloat8Abs, {&x}, {&abs}, args(0));
    run(OpKind::kFloat8Amax, {&abs}, {&amax}, args(0));
    EXPECT_EQ(get_bits(amax), want_bits(c.at("amax")));
    for (int64_t k = 1; k <= (a.pow2 ? 8 : 5); ++k)
      run(OpKind::kFloat8Scale, {k == 1 ? &amax : &scale}, {&scale}, args(k));
    EXPECT_EQ(get_bits(scale), want_bits(c.at("scale")));
    HT x32(DType::kFloat32, {R, C}), scaled(DType::kFloat32, {R, C}),
        clamped(DType::kFloat32, {R, C}), codes(target, {R, C});
    HT* cur = &x;
    if (xd != DType::kFloat32) {
      run(OpKind::kFloat8Cast, {&x}, {&x32}, args(1));
      cur = &x32;
    }
    run(OpKind::kFloat8Cast, {cur, &scale}, {&scaled}, args(2));
    run(OpKind::kFloat8Cast, {&scaled}, {&clamped}, args(3));
    run(OpKind::kFloat8Cast, {&clamped}, {&codes}, args(4));
    EXPECT_EQ(get_bits(codes), want_bits(c.at("codes")));
    // compiled
    HT amax32(DType::kFloat32, {s}), scale_c(DType::kFloat32, {s}), codes_c(target, {R, C});
    run(OpKind::kFloat8Amax, {&x}, {&amax32}, args(0));
    run(OpKind::kFloat8Cast, {&x, &amax32}, {&codes_c, &scale_c}, args(0));
    EXPECT_EQ(get_bits(scale_c), want_bits(c.at("scale")));
    EXPECT_EQ(get_bits(codes_c), want_bits(c.at("codes")));
  }
}

// amax_to_scale over 4,096 amaxes per (target, power-of-two) (zero, subnormals, under the 1e-12
// clamp, +inf and random finite floats): the eager kernel's steps leave torchao's fp32 scale.
TEST(KernelsFloat8, ScalesMatchTorchaoBitForBit) {
  const auto& all = oracle().at("scales");
  ASSERT_EQ(all.size(), 4u);
  for (const auto& c : all) {
    SCOPED_TRACE(c.at("target").get<std::string>() + (c.at("pow2").get<bool>() ? " pow2" : ""));
    const int64_t n = static_cast<int64_t>(c.at("amax").size());
    Float8CastArgs a{1,
                     -1,
                     n,
                     1,
                     0,
                     dtype_of(c.at("target")) == DType::kFloat8E5M2 ? 1 : 0,
                     c.at("pow2").get<bool>() ? 1 : 0};
    HT amax(DType::kFloat32, {n}), scale(DType::kFloat32, {n});
    put_bits(amax, c.at("amax"));
    for (int64_t k = 1; k <= (a.pow2 ? 8 : 5); ++k) {
      a.step = k;
      OpCall op;
      a.encode(op);
      run(OpKind::kFloat8Scale, {k == 1 ? &amax : &scale}, {&scale}, op.iargs);
    }
    EXPECT_EQ(get_bits(scale), want_bits(c.at("scale")));
  }
}

// Every emulated scaled matmul of the oracle (forward, grad_input, grad_weight; fp32 and bf16
// out; tensorwise and per-row / per-column scales) equals torchao's to the bit.
TEST(KernelsFloat8, ScaledMatmulsMatchTorchaoEmulation) {
  const auto& mms = oracle().at("matmuls");
  ASSERT_EQ(mms.size(), 12u);
  for (const auto& c : mms) {
    SCOPED_TRACE(case_name(c));
    const int64_t M = c.at("m"), K = c.at("k"), N = c.at("n");
    const std::string kind = c.at("kind");
    OpKind k = OpKind::kScaledMM;
    Shape as{M, K}, bs{N, K}, ys{M, N};
    if (kind == "backward_input") {
      k = OpKind::kScaledMMBackwardInput;
      as = {M, N};
      ys = {M, K};
    } else if (kind == "backward_weight") {
      k = OpKind::kScaledMMBackwardWeight;
      as = {M, N};
      bs = {M, K};
      ys = {N, K};
    }
    HT pa(dtype_of(c.at("a_format")), as), pb(DType::kFloat8E4M3FN, bs);
    HT sa(DType::kFloat32, {static_cast<int64_t>(c.at("a_scale").size())});
    HT sb(DType::kFloat32, {static_cast<int64_t>(c.at("b_scale").size())});
    HT y(dtype_of(c.at("out")), ys);
    put_bits(pa, c.at("a"));
    put_bits(pb, c.at("b"));
    put_bits(sa, c.at("a_scale"));
    put_bits(sb, c.at("b_scale"));
    OpCall op;
    ScaledMmArgs{M, K, N}.encode(op);
    run(k, {&pa, &pb, &sa, &sb}, {&y}, op.iargs);
    EXPECT_EQ(get_bits(y), want_bits(c.at("y")));
  }
}

// A scale that is neither one value nor one per output row / column is refused, naming the op.
TEST(KernelsFloat8, ScaledMatmulRefusesAScaleAlongTheReducedDim) {
  HT pa(DType::kFloat8E4M3FN, {4, 6}), pb(DType::kFloat8E4M3FN, {3, 6});
  HT sa(DType::kFloat32, {6}), sb(DType::kFloat32, {1}), y(DType::kFloat32, {4, 3});
  OpCall op;
  ScaledMmArgs{4, 6, 3}.encode(op);
  EXPECT_THROW(run(OpKind::kScaledMM, {&pa, &pb, &sa, &sb}, {&y}, op.iargs), InternalError);
}

// The float8 kinds are the CPU's own (cpu::has_kernel) while the op table still marks them
// simulator-only for the CUDA backend, and each reaches its kernel (the empty op is refused by
// its decoder, not by the dispatcher's fall-through).
TEST(KernelsFloat8, EveryFloat8KindReachesItsKernel) {
  for (OpKind k :
       {OpKind::kFloat8Abs, OpKind::kFloat8Amax, OpKind::kFloat8Scale, OpKind::kFloat8Cast,
        OpKind::kScaledMM, OpKind::kScaledMMBackwardInput, OpKind::kScaledMMBackwardWeight}) {
    EXPECT_TRUE(cpu::has_kernel(k)) << op_kind_name(k);
    OpCall op;
    op.kind = k;
    op.name = "empty";
    try {
      cpu::run_kernel(op, {}, {});
      ADD_FAILURE() << op_kind_name(k) << " ran without operands";
    } catch (const InternalError& e) {
      EXPECT_EQ(std::string(e.what()).find("no CPU kernel"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
