#include "core/data/param_init.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/common/error.h"
#include "core/model/module.h"
#include "core/runtime/layer_args.h"
#include "core/tensor/float_convert.h"

// NOTE [Bit-identical init on host and device] needs this file compiled without FMA contraction
// (CMakeLists.txt sets -ffp-contract=off on it); clang also honours the pragma.
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace fullshard {
namespace {

static_assert(static_cast<int>(ParamInit::kNormal) == init_gen::kNormal &&
              static_cast<int>(ParamInit::kOnes) == init_gen::kOnes &&
              static_cast<int>(ParamInit::kZeros) == init_gen::kZeros &&
              static_cast<int>(ParamInit::kUniform) == init_gen::kUniform);

// Elements [g, g + n) of the full tensor (consecutive) into dst[0, n) as fp32.
void fill_run(const init_gen::InitSpec& s, uint64_t g, int64_t n, float* dst) {
  if (s.kind == init_gen::kUniform) {
    for (int64_t i = 0; i < n; ++i)
      dst[i] =
          init_gen::scaled(s.std, init_gen::uniform_unit(s.stream, g + static_cast<uint64_t>(i)));
    return;
  }
  if (s.kind != init_gen::kNormal) {
    std::fill(dst, dst + n, s.kind == init_gen::kOnes ? 1.0f : 0.0f);
    return;
  }
  int64_t i = 0;
  if ((g & 1) && n > 0) {  // starts on the odd half of a pair
    dst[i++] = init_gen::scaled(s.std, init_gen::normal_pair(s.stream, g >> 1).odd);
    ++g;
  }
  // Two pairs an iteration: their dependency chains (log, then sqrt) overlap.
  for (; i + 3 < n; i += 4, g += 4) {
    const init_gen::NormalPair p = init_gen::normal_pair(s.stream, g >> 1);
    const init_gen::NormalPair q = init_gen::normal_pair(s.stream, (g >> 1) + 1);
    dst[i] = init_gen::scaled(s.std, p.even);
    dst[i + 1] = init_gen::scaled(s.std, p.odd);
    dst[i + 2] = init_gen::scaled(s.std, q.even);
    dst[i + 3] = init_gen::scaled(s.std, q.odd);
  }
  for (; i + 1 < n; i += 2, g += 2) {
    const init_gen::NormalPair p = init_gen::normal_pair(s.stream, g >> 1);
    dst[i] = init_gen::scaled(s.std, p.even);
    dst[i + 1] = init_gen::scaled(s.std, p.odd);
  }
  if (i < n) dst[i] = init_gen::scaled(s.std, init_gen::normal_pair(s.stream, g >> 1).even);
}

void store(const float* src, DType dt, void* out, int64_t at, int64_t n) {
  switch (dt) {
    case DType::kFloat32:
      std::memcpy(static_cast<float*>(out) + at, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kBFloat16: {
      uint16_t* d = static_cast<uint16_t*>(out) + at;
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      return;
    }
    case DType::kFloat16: {
      uint16_t* d = static_cast<uint16_t*>(out) + at;
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_fp16(src[i]);
      return;
    }
    default: FULLSHARD_CHECK(false, "kInitParam: a parameter of a non-floating dtype");
  }
}

// Local elements [a, b) of the shard's real (unpadded) elements.
void fill_range(const init_gen::InitSpec& s, DType dt, void* out, int64_t a, int64_t b) {
  constexpr int64_t kChunk = 2048;
  float buf[kChunk];
  for (int64_t i = a; i < b;) {
    // A run of consecutive elements of the full tensor: up to the end of a row, or of the
    // range when whole rows follow each other.
    const int64_t r = i / s.row_numel, c = i % s.row_numel;
    const int64_t run_end = s.contiguous() ? b : std::min(b, (r + 1) * s.row_numel);
    const int64_t n = std::min(kChunk, run_end - i);
    fill_run(s, s.global_index(r, c), n, buf);
    store(buf, dt, out, i, n);
    i += n;
  }
}

}  // namespace

float init_value(int64_t init, double std, uint64_t key, int64_t index) {
  FULLSHARD_CHECK(init >= 0 && init <= 3, "unknown ParamInit " + std::to_string(init));
  return init_gen::element(static_cast<int>(init), std, init_gen::stream_of(key),
                           static_cast<uint64_t>(index));
}

init_gen::NormalPair init_normal_pair(uint64_t key, uint64_t p) {
  return init_gen::normal_pair(init_gen::stream_of(key), p);
}

init_gen::InitSpec init_spec(const OpCall& op) {
  const InitParamArgs a = InitParamArgs::decode(op);  // core/runtime/layer_args.h
  init_gen::InitSpec s;
  s.row_offset = a.row_offset;
  s.local_rows = a.local_rows;
  s.row_numel = a.row_numel;
  s.kind = static_cast<int>(a.init);
  s.stream = init_gen::stream_of(static_cast<uint64_t>(a.key));
  s.std = a.std;
  s.numel = op.outputs[0].meta.numel();
  s.row_stride = s.row_numel;
  FULLSHARD_CHECK(s.real() <= s.numel, "kInitParam " + op.name + ": shard larger than its storage");
  if (a.layout == InitParamArgs::Layout::kColumns) {
    // Columns [col_offset, col_offset + row_numel) of rows of full_row elements (a tensor-
    // parallel Shard(1) block).
    s.col_offset = a.col_offset;
    s.row_stride = a.full_row;
  } else if (a.layout == InitParamArgs::Layout::kBlocks) {
    // Rows of a tensor stacked from blocks each sharded over tp (GPT-2's fused c_attn): local
    // row l is row l % block of block l / block, i.e. global row
    // (l / block) * block * tp + tp_index * block + l % block.
    s.block = a.block;
    s.tp_index = a.tp_index;
    s.tp = a.tp;
  }
  return s;
}

// NOTE [Threaded host init]: the shard's real elements split into equal ranges, one a thread,
// each a pure function of its global indices: the result is the same for any thread count.
// Ranges under 64 Ki elements are not worth a thread.
void fill_init_param(const init_gen::InitSpec& s, DType dt, void* out, int threads) {
  FULLSHARD_CHECK(
      dt == DType::kFloat32 || dt == DType::kBFloat16 || dt == DType::kFloat16,
      "kInitParam: a parameter of dtype " + std::string(dtype_name(dt)) + ", not a floating one");
  const int64_t real = s.real();
  const uint64_t esize = dtype_size(dt);
  if (s.numel > real)
    std::memset(static_cast<char*>(out) + real * esize, 0,
                static_cast<size_t>((s.numel - real) * esize));
  constexpr int64_t kMinPerThread = int64_t{1} << 16;
  const int64_t n =
      std::max<int64_t>(1, std::min<int64_t>(threads, (real + kMinPerThread - 1) / kMinPerThread));
  if (n == 1) {
    fill_range(s, dt, out, 0, real);
    return;
  }
  const int64_t per = ((real + n - 1) / n + 1) & ~int64_t{1};  // even: pairs stay whole
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int64_t t = 1; t < n; ++t)
    pool.emplace_back([&, t] {
      try {
        fill_range(s, dt, out, std::min(real, t * per), std::min(real, (t + 1) * per));
      } catch (...) {
        errors[static_cast<size_t>(t)] = std::current_exception();
      }
    });
  try {
    fill_range(s, dt, out, 0, std::min(real, per));
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void run_init_param(const OpCall& op, void* out, int threads) {
  fill_init_param(init_spec(op), op.outputs[0].meta.dtype, out, threads);
}

std::vector<float> init_param_values(const OpCall& op) {
  const init_gen::InitSpec s = init_spec(op);
  std::vector<float> values(static_cast<size_t>(s.numel));
  fill_init_param(s, DType::kFloat32, values.data(), 1);
  return values;
}

int host_init_threads() {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int local = 1;
  if (const char* v = std::getenv("LOCAL_WORLD_SIZE")) local = std::max(1, std::atoi(v));
  return std::max(1, cores / local);
}

}  // namespace fullshard
