#pragma once
// Helpers for the gloo tests: ranks as threads over one HashStore, and the reference results
// the collectives must produce (computed here independently of backends/gloo).
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/device.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "backends/gloo/process_group.h"
#include "core/mesh/device_mesh.h"
#include "core/tensor/float_convert.h"

namespace fullshard::gloo_test {

using gloo_backend::CollectiveError;
using gloo_backend::GlooProcessGroup;
using gloo_backend::ProcessGroupOptions;
using Bytes = std::vector<uint8_t>;

// Runs fn(rank) on n threads at once; rethrows the first exception after joining all.
inline void parallel(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

inline ProcessGroup world_group(int n, std::string name = "world") {
  ProcessGroup g;
  g.name = std::move(name);
  for (int i = 0; i < n; ++i) g.ranks.push_back(i);
  return g;
}

// n ranks as threads of this process: one store, one TCP device per rank (as per process).
struct ThreadWorld {
  explicit ThreadWorld(int n) : size(n), store(std::make_shared<::gloo::rendezvous::HashStore>()) {
    for (int r = 0; r < n; ++r) devices.push_back(gloo_backend::make_tcp_device());
  }
  // Every rank constructs its GlooProcessGroup for group_of(rank) (concurrently, as real
  // ranks do); result[r] is rank r's.
  std::vector<std::unique_ptr<GlooProcessGroup>> make_groups(
      const std::function<ProcessGroup(int)>& group_of, ProcessGroupOptions options = {}) {
    std::vector<std::unique_ptr<GlooProcessGroup>> out(size);
    parallel(size, [&](int r) {
      out[r] = std::make_unique<GlooProcessGroup>(rank_stores.empty() ? store : rank_stores[r],
                                                  devices[r], group_of(r), r, options);
    });
    return out;
  }
  std::vector<std::unique_ptr<GlooProcessGroup>> make_world(ProcessGroupOptions options = {}) {
    const int n = size;
    return make_groups([n](int) { return world_group(n); }, options);
  }

  int size;
  std::shared_ptr<::gloo::rendezvous::Store> store;
  // One store object per rank (when set): gloo's FileStore is not thread-safe (set() appends to
  // an unguarded vector of touched files), so ranks-as-threads over a FileStore each need their
  // own object, as separate processes have.
  std::vector<std::shared_ptr<::gloo::rendezvous::Store>> rank_stores;
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
};

// ---------------------------------------------------------------------------------------------
// Values and the reference reduction.

inline float load(DType d, const uint8_t* p) {
  switch (d) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_float(h);
    }
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return fp16_to_float(h);
    }
    default: return 0;
  }
}

inline void store(DType d, float f, uint8_t* p) {
  switch (d) {
    case DType::kFloat32: std::memcpy(p, &f, 4); break;
    case DType::kBFloat16: {
      uint16_t h = float_to_bf16(f);
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::kFloat16: {
      uint16_t h = float_to_fp16(f);
      std::memcpy(p, &h, 2);
      break;
    }
    default: break;
  }
}

// n elements of dtype d: floats in [-8, 8) with a varied exponent (rounded to d), or random
// bytes for the integer dtypes.
inline Bytes random_values(DType d, size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  Bytes b(n * dtype_size(d));
  if (d == DType::kUInt8 || d == DType::kInt64) {
    for (auto& x : b) x = static_cast<uint8_t>(gen());
    return b;
  }
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  std::uniform_int_distribution<int> e(-6, 3);
  for (size_t i = 0; i < n; ++i) store(d, std::ldexp(u(gen), e(gen)), b.data() + i * dtype_size(d));
  return b;
}

// The documented reduction (backends/gloo/reduce_kernels.h): element `i` of every rank's
// `inputs`, visiting ranks first, first+1, ... (mod N); one rounding to d per visit; kAvg
// divides by N before the last rounding; kPremulSum multiplies each input by float(scale).
inline void reference_reduce(DType d, ReduceOp op, double scale, const std::vector<Bytes>& inputs,
                             size_t i, int first, uint8_t* out) {
  const int n = static_cast<int>(inputs.size());
  const size_t es = dtype_size(d);
  uint8_t partial[4] = {};
  for (int k = 0; k < n; ++k) {
    const int member = (first + k) % n;
    float x = load(d, inputs[member].data() + i * es);
    if (op == ReduceOp::kPremulSum) x *= static_cast<float>(scale);
    float acc = x;
    if (k > 0) {
      const float p = load(d, partial);
      if (op == ReduceOp::kMax)
        acc = (p != p || p > x) ? p : x;
      else
        acc = p + x;
    }
    if (k == n - 1 && op == ReduceOp::kAvg) acc /= static_cast<float>(n);
    store(d, acc, partial);
  }
  std::memcpy(out, partial, es);
}

// What reduce_scatter must leave on `rank`: chunk `rank` reduced in ring order rank+1, ...
inline Bytes expected_reduce_scatter(DType d, ReduceOp op, double scale,
                                     const std::vector<Bytes>& inputs, size_t count, int rank) {
  const int n = static_cast<int>(inputs.size());
  const size_t es = dtype_size(d);
  Bytes out(count * es);
  for (size_t j = 0; j < count; ++j)
    reference_reduce(d, op, scale, inputs, rank * count + j, (rank + 1) % n, out.data() + j * es);
  return out;
}

// What all_reduce must leave on every rank: count split into N chunks, the first count % N one
// element longer; chunk c reduced in ring order c+1, ...
inline Bytes expected_all_reduce(DType d, ReduceOp op, double scale,
                                 const std::vector<Bytes>& inputs, size_t count) {
  const int n = static_cast<int>(inputs.size());
  const size_t es = dtype_size(d);
  Bytes out(count * es);
  size_t i = 0;
  for (int c = 0; c < n; ++c) {
    const size_t len = count / n + (static_cast<size_t>(c) < count % n ? 1 : 0);
    for (size_t j = 0; j < len; ++j, ++i)
      reference_reduce(d, op, scale, inputs, i, (c + 1) % n, out.data() + i * es);
  }
  return out;
}

inline const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> v{DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  return v;
}
inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> v{DType::kFloat32, DType::kBFloat16, DType::kFloat16,
                                    DType::kUInt8, DType::kInt64};
  return v;
}
inline const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> v{ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kPremulSum,
                                       ReduceOp::kMax};
  return v;
}

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace fullshard::gloo_test
