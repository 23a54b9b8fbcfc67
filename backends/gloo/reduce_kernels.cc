#include "backends/gloo/reduce_kernels.h"

#include <cstdint>

#include "core/common/error.h"
#include "core/tensor/float_convert.h"

namespace fullshard::gloo_backend {
namespace {

struct F32 {
  using T = float;
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};
struct BF16 {
  using T = uint16_t;
  static float load(uint16_t v) { return bf16_to_float(v); }
  static uint16_t store(float v) { return float_to_bf16(v); }
};
struct F16 {
  using T = uint16_t;
  static float load(uint16_t v) { return fp16_to_float(v); }
  static uint16_t store(float v) { return float_to_fp16(v); }
};

inline float max_nan(float a, float b) { return (a != a || a > b) ? a : b; }

// One loop per (codec, op, last) so that the inner loop has no branches on the spec.
template <class C, ReduceOp kOp, bool kLast>
void step_loop(const ReduceSpec& s, void* dst, const void* partial, const void* x, size_t n) {
  using T = typename C::T;
  T* d = static_cast<T*>(dst);
  const T* p = static_cast<const T*>(partial);
  const T* v = static_cast<const T*>(x);
  const float scale = s.scale;
  const float divisor = static_cast<float>(s.group_size);
  for (size_t i = 0; i < n; ++i) {
    float mine = C::load(v[i]);
    if constexpr (kOp == ReduceOp::kPremulSum) mine *= scale;
    float acc;
    if (p == nullptr) {
      acc = mine;
    } else if constexpr (kOp == ReduceOp::kMax) {
      acc = max_nan(C::load(p[i]), mine);
    } else {
      acc = C::load(p[i]) + mine;
    }
    if constexpr (kLast && kOp == ReduceOp::kAvg) acc = acc / divisor;
    d[i] = C::store(acc);
  }
}

template <class C, ReduceOp kOp>
void dispatch_last(const ReduceSpec& s, void* dst, const void* partial, const void* x, size_t n,
                   bool last) {
  if (last)
    step_loop<C, kOp, true>(s, dst, partial, x, n);
  else
    step_loop<C, kOp, false>(s, dst, partial, x, n);
}

template <class C>
void dispatch_op(const ReduceSpec& s, void* dst, const void* partial, const void* x, size_t n,
                 bool last) {
  switch (s.op) {
    case ReduceOp::kSum: return dispatch_last<C, ReduceOp::kSum>(s, dst, partial, x, n, last);
    case ReduceOp::kAvg: return dispatch_last<C, ReduceOp::kAvg>(s, dst, partial, x, n, last);
    case ReduceOp::kPremulSum:
      return dispatch_last<C, ReduceOp::kPremulSum>(s, dst, partial, x, n, last);
    case ReduceOp::kMax: return dispatch_last<C, ReduceOp::kMax>(s, dst, partial, x, n, last);
  }
  FULLSHARD_CHECK(false, "unknown reduce op");
}

void run(const ReduceSpec& s, void* dst, const void* partial, const void* x, size_t n, bool last) {
  switch (s.dtype) {
    case DType::kFloat32: return dispatch_op<F32>(s, dst, partial, x, n, last);
    case DType::kBFloat16: return dispatch_op<BF16>(s, dst, partial, x, n, last);
    case DType::kFloat16: return dispatch_op<F16>(s, dst, partial, x, n, last);
    default: break;
  }
  FULLSHARD_CHECK(false,
                  std::string("gloo: cannot reduce dtype ") + std::string(dtype_name(s.dtype)));
}

}  // namespace

bool reducible(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kBFloat16 || dtype == DType::kFloat16;
}

void reduce_first(const ReduceSpec& spec, void* dst, const void* x, size_t n, bool last) {
  run(spec, dst, nullptr, x, n, last);
}

void reduce_step(const ReduceSpec& spec, void* dst, const void* partial, const void* x, size_t n,
                 bool last) {
  FULLSHARD_CHECK(partial != nullptr, "reduce_step needs a partial");
  run(spec, dst, partial, x, n, last);
}

}  // namespace fullshard::gloo_backend
