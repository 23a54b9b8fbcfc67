// NOTE [Bit-identical init on host and device] (core/data/init_generator.h): the init kernel writes
// exactly the bytes the host's fill_init_param writes, for every layout (row shards with padding,
// tensor-parallel Shard(1) column blocks, GPT-2's stacked blocks), every dtype and init kind, and
// over 2^24 consecutive draws of one parameter. Needs a GPU: exits 77 (ctest: skipped) without one.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/kernels/init_param.h"
#include "core/data/param_init.h"
#include "core/model/module.h"
#include "tests/gpu/gpu_test_main.h"

namespace {

using namespace fullshard;

void ok(cudaError_t e, const char* what) {
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

// The device's bytes of spec in dtype dt.
std::vector<uint8_t> on_device(const init_gen::InitSpec& spec, DType dt) {
  const size_t bytes = static_cast<size_t>(spec.numel) * dtype_size(dt);
  std::vector<uint8_t> out(bytes, 0xcd);
  void* d = nullptr;
  ok(cudaMalloc(&d, bytes + 1), "cudaMalloc");
  ok(cudaMemset(d, 0xab, bytes + 1), "cudaMemset");  // padding must be written, not left
  cuda::launch::init_param(spec, dt, d, nullptr);
  ok(cudaStreamSynchronize(nullptr), "init_param");
  ok(cudaMemcpy(out.data(), d, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  ok(cudaFree(d), "cudaFree");
  return out;
}

std::vector<uint8_t> on_host(const init_gen::InitSpec& spec, DType dt) {
  std::vector<uint8_t> out(static_cast<size_t>(spec.numel) * dtype_size(dt), 0xcd);
  fill_init_param(spec, dt, out.data(), 4);
  return out;
}

// The first differing element, or -1.
int64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, DType dt) {
  if (a.size() != b.size()) return 0;
  const size_t e = dtype_size(dt);
  for (size_t i = 0; i < a.size(); i += e)
    if (std::memcmp(&a[i], &b[i], e) != 0) return static_cast<int64_t>(i / e);
  return -1;
}

init_gen::InitSpec spec_of(int layout, int64_t row_offset, int64_t rows, int64_t cols,
                           int64_t pad_rows, int kind, uint64_t key) {
  OpCall op;
  op.kind = OpKind::kInitParam;
  op.name = "p";
  op.outputs = {TensorRef{1, 0, TensorMeta{DType::kFloat32, {(rows + pad_rows) * cols}}}};
  op.iargs = {row_offset, rows, cols, kind, static_cast<int64_t>(key)};
  if (layout == 1)
    op.iargs.insert(op.iargs.end(), {3, cols * 2 + 3});         // Shard(1): columns [3, 3 + cols)
  if (layout == 2) op.iargs.insert(op.iargs.end(), {5, 1, 2});  // blocks of 5 rows, tp rank 1 of 2
  op.fargs = {0.02};
  return init_spec(op);
}

void expect_same(const init_gen::InitSpec& s, DType dt, const std::string& what) {
  const auto dev = on_device(s, dt), host = on_host(s, dt);
  const int64_t at = first_difference(dev, host, dt);
  EXPECT_EQ(at, -1) << what << " " << dtype_name(dt) << ": element " << at << " differs";
}

TEST(CudaInitParam, EveryLayoutDtypeAndKindMatchesTheHost) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16})
    for (int layout = 0; layout < 3; ++layout)
      for (int kind : {init_gen::kNormal, init_gen::kOnes, init_gen::kZeros})
        for (int64_t cols : {1, 2, 7, 64, 1023})
          for (int64_t offset : {0, 1, 3}) {
            const auto s = spec_of(layout, offset, 37, cols, 3, kind, 77 + cols);
            expect_same(s, dt,
                        "layout " + std::to_string(layout) + " kind " + std::to_string(kind) +
                            " cols " + std::to_string(cols) + " offset " + std::to_string(offset));
          }
}

// 2^24 consecutive draws of one parameter (fp32, with an odd row offset) and a shard far into
// a large tensor: every bit, so a last-place difference in any step would show.
TEST(CudaInitParam, SixteenMillionDrawsMatchTheHost) {
  expect_same(spec_of(0, 1, 4096, 4096, 0, init_gen::kNormal, 20261128), DType::kFloat32,
              "2^24 draws");
  expect_same(spec_of(1, 100000, 512, 2048, 1, init_gen::kNormal, 5), DType::kBFloat16,
              "rows 100000..");
  expect_same(spec_of(0, int64_t{1} << 20, 64, 4097, 2, init_gen::kNormal, ~uint64_t{0}),
              DType::kFloat16, "far");
}

RC_GTEST_PROP(CudaInitParam, RandomShardsMatchTheHost, ()) {
  const int layout = *rc::gen::inRange(0, 3);
  const int64_t rows = *rc::gen::inRange(0, 300), cols = *rc::gen::inRange(1, 300);
  const int64_t offset = *rc::gen::inRange(0, 1000), pad = *rc::gen::inRange(0, 3);
  const DType dt = *rc::gen::element(DType::kFloat32, DType::kBFloat16, DType::kFloat16);
  const auto s =
      spec_of(layout, offset, rows, cols, pad, init_gen::kNormal, *rc::gen::arbitrary<uint64_t>());
  const auto dev = on_device(s, dt), host = on_host(s, dt);
  RC_ASSERT(first_difference(dev, host, dt) == -1);
}

TEST(CudaInitParam, AnEmptyShardWritesNothing) {
  const auto s = spec_of(0, 0, 0, 8, 0, init_gen::kNormal, 1);
  cuda::launch::init_param(s, DType::kFloat32, nullptr, nullptr);
  ok(cudaStreamSynchronize(nullptr), "empty init");
}

}  // namespace
