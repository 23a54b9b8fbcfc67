#pragma once
// Helpers shared by the kernels_*_test.cc suites: host tensors of any dtype, running one
// OpKind on them through fullshard::cpu::run_kernel, random data, closeness checks and
// central finite differences over double-precision reference functions.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "core/common/error.h"
#include "core/tensor/float_convert.h"

namespace kt {

using namespace fullshard;
using Vec = std::vector<double>;

// Rounds v to dtype dt and back (what storing then loading gives).
inline double round_to(DType dt, double v) {
  switch (dt) {
    case DType::kFloat32: return static_cast<float>(v);
    case DType::kBFloat16: return bf16_to_float(float_to_bf16(static_cast<float>(v)));
    case DType::kFloat16: return fp16_to_float(float_to_fp16(static_cast<float>(v)));
    case DType::kInt64: return static_cast<double>(static_cast<int64_t>(v));
    case DType::kUInt8: return static_cast<double>(static_cast<uint8_t>(v));
    default: break;  // float8: not a kernel-test dtype
  }
  return v;
}

// A contiguous host tensor (8-byte aligned storage).
struct HT {
  TensorMeta meta;
  std::vector<uint64_t> mem;
  HT() = default;
  HT(DType dt, Shape s) : meta{dt, std::move(s)} { mem.assign((meta.nbytes() + 7) / 8 + 1, 0); }
  int64_t numel() const { return meta.numel(); }
  void* data() { return mem.data(); }
  const void* data() const { return mem.data(); }
  double get(int64_t i) const {
    const void* p = mem.data();
    switch (meta.dtype) {
      case DType::kFloat32: return static_cast<const float*>(p)[i];
      case DType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
      case DType::kFloat16: return fp16_to_float(static_cast<const uint16_t*>(p)[i]);
      case DType::kInt64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
      case DType::kUInt8: return static_cast<const uint8_t*>(p)[i];
      default: break;
    }
    return 0;
  }
  uint16_t bits16(int64_t i) const { return static_cast<const uint16_t*>(data())[i]; }
  uint32_t bits32(int64_t i) const {
    return std::bit_cast<uint32_t>(static_cast<const float*>(data())[i]);
  }
  void set(int64_t i, double v) {
    void* p = mem.data();
    switch (meta.dtype) {
      case DType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
      case DType::kBFloat16:
        static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v));
        break;
      case DType::kFloat16:
        static_cast<uint16_t*>(p)[i] = float_to_fp16(static_cast<float>(v));
        break;
      case DType::kInt64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
      case DType::kUInt8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
      default: break;
    }
  }
  Vec values() const {
    Vec v(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) v[i] = get(i);
    return v;
  }
  void set_values(const Vec& v) {
    for (int64_t i = 0; i < numel(); ++i) set(i, v[i]);
  }
  TensorRef ref() const {
    TensorRef r;
    r.meta = meta;
    r.buffer_id = reinterpret_cast<uintptr_t>(this);
    return r;
  }
};

inline HT from_values(DType dt, Shape s, const Vec& v) {
  HT t(dt, std::move(s));
  t.set_values(v);
  return t;
}

inline HT random_tensor(DType dt, Shape s, std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
  HT t(dt, std::move(s));
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng));
  return t;
}

inline Vec random_vec(size_t n, std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  Vec v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

inline OpCall make_call(OpKind k, const std::vector<HT*>& in, const std::vector<HT*>& out,
                        std::vector<int64_t> iargs = {}, std::vector<double> fargs = {}) {
  OpCall op;
  op.kind = k;
  op.name = "test";
  for (HT* t : in) op.inputs.push_back(t->ref());
  for (HT* t : out) op.outputs.push_back(t->ref());
  op.iargs = std::move(iargs);
  op.fargs = std::move(fargs);
  return op;
}

// Runs kind k with the given tensors (the same HT in both lists for an in-place op).
inline void run(OpKind k, const std::vector<HT*>& in, const std::vector<HT*>& out,
                std::vector<int64_t> iargs = {}, std::vector<double> fargs = {}) {
  OpCall op = make_call(k, in, out, std::move(iargs), std::move(fargs));
  std::vector<void*> pi, po;
  for (HT* t : in) pi.push_back(t->data());
  for (HT* t : out) po.push_back(t->data());
  cpu::run_kernel(op, pi, po);
}

// "" when |a_i - e_i| <= atol + rtol * |e_i| for all i, else a description of the worst.
inline std::string mismatch(const Vec& a, const Vec& e, double atol, double rtol,
                            const std::string& what = "") {
  if (a.size() != e.size())
    return what + ": size " + std::to_string(a.size()) + " vs " + std::to_string(e.size());
  double worst = 0;
  size_t wi = 0;
  bool bad = false;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - e[i]), tol = atol + rtol * std::abs(e[i]);
    if (!(err <= tol) && (!bad || err - tol > worst)) {
      bad = true;
      worst = err - tol;
      wi = i;
    }
  }
  if (!bad) return "";
  std::ostringstream s;
  s.precision(9);
  s << what << ": element " << wi << " is " << a[wi] << ", expected " << e[wi] << " (atol " << atol
    << ", rtol " << rtol << ")";
  return s.str();
}

#define KT_EXPECT_CLOSE(a, e, atol, rtol)                                  \
  do {                                                                     \
    const std::string kt_m = ::kt::mismatch((a), (e), (atol), (rtol), #a); \
    EXPECT_TRUE(kt_m.empty()) << kt_m;                                     \
  } while (0)
#define KT_RC_CLOSE(a, e, atol, rtol)                                      \
  do {                                                                     \
    const std::string kt_m = ::kt::mismatch((a), (e), (atol), (rtol), #a); \
    if (!kt_m.empty()) RC_FAIL(kt_m);                                      \
  } while (0)

// d/dx_i of sum_j w_j f(x)_j by central differences (double precision), for every i.
inline Vec fd_grad(const std::function<Vec(const Vec&)>& f, Vec x, const Vec& w, double h = 1e-5) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    Vec fp = f(x);
    x[i] = x0 - h;
    Vec fm = f(x);
    x[i] = x0;
    double s = 0;
    for (size_t j = 0; j < w.size(); ++j) s += w[j] * (fp[j] - fm[j]);
    g[i] = s / (2 * h);
  }
  return g;
}

inline const char* dtype_str(DType d) {
  switch (d) {
    case DType::kFloat32: return "fp32";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat16: return "fp16";
    default: return "other";
  }
}

// Half-ulp-ish relative precision of a storage dtype (for tolerances on rounded outputs).
inline double rel_eps(DType d) {
  switch (d) {
    case DType::kBFloat16: return 1.0 / 256;
    case DType::kFloat16: return 1.0 / 2048;
    default: return 1e-6;
  }
}

inline rc::Gen<DType> gen_float_dtype() {
  return rc::gen::element(DType::kFloat32, DType::kBFloat16, DType::kFloat16);
}

inline double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace kt
