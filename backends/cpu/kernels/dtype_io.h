#pragma once
// The CPU backend's dtype access (its kernels, parameter init, reading values back): loading
// storage of any floating dtype as fp32 and storing fp32 results with round-to-nearest-even
// (core/tensor/float_convert.h), plus the kernels' argument checks.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/runtime/op.h"
#include "core/tensor/float_convert.h"

namespace fullshard::cpu::detail {

inline bool is_float_dtype(DType d) {
  return d == DType::kFloat32 || d == DType::kBFloat16 || d == DType::kFloat16;
}

// NOTE [Empty copies]: memcpy/memmove with a null pointer is undefined behaviour even for 0
// bytes (C11 7.24.1p2; UBSan's nonnull-attribute check), and an empty tensor's storage is a
// null pointer. n == 0 returns before any pointer is touched.

// Elements [offset, offset + n) of `src` (storage dtype `dt`) as fp32 into dst[0, n).
inline void load_f32(const void* src, DType dt, int64_t offset, int64_t n, float* dst) {
  if (n <= 0) return;  // NOTE [Empty copies]
  switch (dt) {
    case DType::kFloat32:
      std::memcpy(dst, static_cast<const float*>(src) + offset, static_cast<size_t>(n) * 4);
      return;
    case DType::kBFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
      return;
    }
    case DType::kFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(s[i]);
      return;
    }
    default: FULLSHARD_CHECK(false, "kernel: non-floating dtype where a float tensor was expected");
  }
}

// fp32 src[0, n) rounded to `dt` into elements [offset, offset + n) of `dst`.
inline void store_f32(const float* src, void* dst, DType dt, int64_t offset, int64_t n) {
  if (n <= 0) return;  // NOTE [Empty copies]
  switch (dt) {
    case DType::kFloat32:
      std::memmove(static_cast<float*>(dst) + offset, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kBFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + offset;
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      return;
    }
    case DType::kFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + offset;
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_fp16(src[i]);
      return;
    }
    default: FULLSHARD_CHECK(false, "kernel: non-floating dtype where a float tensor was expected");
  }
}

// Copies n elements from src (dtype sd, element offset so) to dst (dtype dd, element offset
// do_), converting through fp32 when the dtypes differ (a bit copy when they match).
void convert(const void* src, DType sd, int64_t so, void* dst, DType dd, int64_t do_, int64_t n);

// A read-only fp32 view of a whole tensor: aliases the storage when it is fp32, else an
// fp32 copy.
class F32In {
 public:
  F32In(const F32In&) = delete;
  F32In& operator=(const F32In&) = delete;
  F32In(F32In&&) = default;  // the moved vector keeps its heap buffer: ptr_ stays valid
  F32In(const void* p, DType dt, int64_t n) {
    if (dt == DType::kFloat32) {
      ptr_ = static_cast<const float*>(p);
    } else {
      buf_.resize(static_cast<size_t>(n));
      load_f32(p, dt, 0, n, buf_.data());
      ptr_ = buf_.data();
    }
  }
  const float* data() const { return ptr_; }
  const float& operator[](int64_t i) const { return ptr_[i]; }

 private:
  const float* ptr_ = nullptr;
  std::vector<float> buf_;
};

// A writable fp32 buffer for a whole output tensor: the storage itself when fp32, else a
// scratch buffer rounded into the storage by commit(). Initial contents are unspecified
// unless `load` is true.
class F32Out {
 public:
  F32Out(const F32Out&) = delete;
  F32Out& operator=(const F32Out&) = delete;
  F32Out(void* p, DType dt, int64_t n, bool load = false) : p_(p), dt_(dt), n_(n) {
    if (dt == DType::kFloat32) {
      ptr_ = static_cast<float*>(p);
    } else {
      buf_.resize(static_cast<size_t>(n));
      if (load) load_f32(p, dt, 0, n, buf_.data());
      ptr_ = buf_.data();
    }
  }
  float* data() { return ptr_; }
  float& operator[](int64_t i) { return ptr_[i]; }
  void commit() {
    if (dt_ != DType::kFloat32) store_f32(buf_.data(), p_, dt_, 0, n_);
  }

 private:
  void* p_;
  DType dt_;
  int64_t n_;
  float* ptr_ = nullptr;
  std::vector<float> buf_;
};

// Elementwise work is done in chunks of this many elements through stack buffers.
constexpr int64_t kChunk = 2048;

// Argument checks: a kernel-contract violation is a fullshard bug (InternalError).
inline void expect_arity(const OpCall& op, size_t n_in, size_t n_out) {
  FULLSHARD_CHECK(op.inputs.size() == n_in && op.outputs.size() == n_out,
                  std::string(op_kind_name(op.kind)) + " '" + op.name + "': expected " +
                      std::to_string(n_in) + " inputs and " + std::to_string(n_out) +
                      " outputs, got " + std::to_string(op.inputs.size()) + " and " +
                      std::to_string(op.outputs.size()));
}
inline std::string where(const OpCall& op) {
  return std::string(op_kind_name(op.kind)) + " '" + op.name + "': ";
}
inline const TensorMeta& in_meta(const OpCall& op, size_t i) { return op.inputs[i].meta; }
inline const TensorMeta& out_meta(const OpCall& op, size_t i) { return op.outputs[i].meta; }
inline int64_t last_dim(const TensorMeta& m) { return m.shape.empty() ? 1 : m.shape.back(); }

}  // namespace fullshard::cpu::detail
