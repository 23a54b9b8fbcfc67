// GlooProcessGroup's collectives, ranks as threads over a HashStore: world sizes 1-4, counts 0,
// 1, odd and uneven, every dtype and reduce op; results checked bit for bit against the
// reference in gloo_test_support.h (bf16/fp16 rounded once per ring step, as documented).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <atomic>

#include "core/common/error.h"
#include "tests/unit/gloo_test_support.h"

using namespace fullshard;
using namespace fullshard::gloo_test;

namespace {

std::string label(int world, DType d, size_t count, const char* what) {
  return std::string(what) + " world " + std::to_string(world) + " " + std::string(dtype_name(d)) +
         " x " + std::to_string(count);
}

class GlooCollectives : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectives, AllGatherOutOfPlaceAndInPlace) {
  const int n = GetParam();
  ThreadWorld w(n);
  auto pgs = w.make_world();
  for (DType d : all_dtypes()) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{33}}) {
      const size_t es = dtype_size(d);
      std::vector<Bytes> inputs(n);
      for (int r = 0; r < n; ++r) inputs[r] = random_values(d, count, 100 * r + count);
      Bytes expected;
      for (auto& in : inputs) expected.insert(expected.end(), in.begin(), in.end());
      for (bool in_place : {false, true}) {
        std::vector<Bytes> outs(n, Bytes(n * count * es, 0xAB));
        parallel(n, [&](int r) {
          const void* input = inputs[r].data();
          if (in_place) {
            // count 0: the vectors are empty and their data() may be null (memcpy's UB).
            if (count > 0)
              std::memcpy(outs[r].data() + r * count * es, inputs[r].data(), count * es);
            input = outs[r].data() + r * count * es;
          }
          pgs[r]->all_gather(input, outs[r].data(), count, d, "ag");
        });
        for (int r = 0; r < n; ++r)
          ASSERT_EQ(outs[r], expected)
              << label(n, d, count, in_place ? "in-place ag" : "ag") << " rank " << r;
      }
    }
  }
}

// all_to_all_single with split sizes (expert parallelism's token dispatch): rank s sends rank d
// (s + 2 d) % 4 elements (0 included), each naming its source, its destination and its index.
TEST_P(GlooCollectives, AllToAllUnevenSplits) {
  const int n = GetParam();
  ThreadWorld w(n);
  auto pgs = w.make_world();
  auto count = [](int s, int d) { return static_cast<size_t>((s + 2 * d) % 4); };
  auto value = [](int s, int d, size_t i) { return int64_t{10000} * s + 100 * d + i; };
  std::vector<std::vector<int64_t>> outs(n);
  parallel(n, [&](int r) {
    std::vector<size_t> send(n), recv(n);
    std::vector<int64_t> in;
    for (int d = 0; d < n; ++d) {
      send[d] = count(r, d);
      recv[d] = count(d, r);
      for (size_t i = 0; i < send[d]; ++i) in.push_back(value(r, d, i));
    }
    size_t total = 0;
    for (size_t c : recv) total += c;
    outs[r].assign(total, -1);
    pgs[r]->all_to_all(in.data(), send, outs[r].data(), recv, DType::kInt64, "a2a");
  });
  for (int r = 0; r < n; ++r) {
    std::vector<int64_t> want;
    for (int s = 0; s < n; ++s)
      for (size_t i = 0; i < count(s, r); ++i) want.push_back(value(s, r, i));
    EXPECT_EQ(outs[r], want) << "world " << n << " rank " << r;
  }
}

TEST_P(GlooCollectives, ReduceScatterEveryDtypeAndOp) {
  const int n = GetParam();
  ThreadWorld w(n);
  auto pgs = w.make_world();
  for (DType d : float_dtypes()) {
    for (ReduceOp op : all_ops()) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{17}}) {
        const size_t es = dtype_size(d);
        const double scale = 0.37;
        std::vector<Bytes> inputs(n);
        for (int r = 0; r < n; ++r) inputs[r] = random_values(d, n * count, 7 * r + count + 1);
        const std::vector<Bytes> inputs_before = inputs;
        std::vector<Bytes> outs(n, Bytes(count * es, 0xCD));
        parallel(n, [&](int r) {
          pgs[r]->reduce_scatter(inputs[r].data(), outs[r].data(), count, d, op, scale, "rs");
        });
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(outs[r], expected_reduce_scatter(d, op, scale, inputs_before, count, r))
              << label(n, d, count, "rs") << " op " << reduce_op_name(op) << " rank " << r;
          ASSERT_EQ(inputs[r], inputs_before[r]) << "reduce_scatter modified its input";
        }
      }
    }
  }
}

TEST_P(GlooCollectives, ReduceScatterOutputAliasingItsInputChunk) {
  const int n = GetParam();
  ThreadWorld w(n);
  auto pgs = w.make_world();
  const size_t count = 9;
  const DType d = DType::kBFloat16;
  std::vector<Bytes> inputs(n);
  for (int r = 0; r < n; ++r) inputs[r] = random_values(d, n * count, 31 + r);
  const std::vector<Bytes> before = inputs;
  parallel(n, [&](int r) {
    uint8_t* mine = inputs[r].data() + r * count * 2;
    pgs[r]->reduce_scatter(inputs[r].data(), mine, count, d, ReduceOp::kAvg, 1.0, "rs-inplace");
  });
  for (int r = 0; r < n; ++r) {
    Bytes got(inputs[r].begin() + r * count * 2, inputs[r].begin() + (r + 1) * count * 2);
    ASSERT_EQ(got, expected_reduce_scatter(d, ReduceOp::kAvg, 1.0, before, count, r)) << r;
  }
}

TEST_P(GlooCollectives, AllReduceUnevenCountsEveryDtypeAndOp) {
  const int n = GetParam();
  ThreadWorld w(n);
  auto pgs = w.make_world();
  for (DType d : float_dtypes()) {
    for (ReduceOp op : all_ops()) {
      // 3 < n for n = 4: some chunks are empty.
      for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{10}, size_t{33}}) {
        const double scale = 1.0 / 3.0;
        std::vector<Bytes> bufs(n);
        for (int r = 0; r < n; ++r) bufs[r] = random_values(d, count, 13 * r + count + 5);
        const Bytes expected = expected_all_reduce(d, op, scale, bufs, count);
        parallel(n, [&](int r) { pgs[r]->all_reduce(bufs[r].data(), count, d, op, scale, "ar"); });
        for (int r = 0; r < n; ++r)
          ASSERT_EQ(bufs[r], expected)
              << label(n, d, count, "ar") << " op " << reduce_op_name(op) << " rank " << r;
      }
    }
  }
}

TEST_P(GlooCollectives, BroadcastFromEveryRoot) {
  const int n = GetParam();
  ThreadWorld w(n);
  auto pgs = w.make_world();
  for (DType d : all_dtypes()) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{11}}) {
      for (int root = 0; root < n; ++root) {
        const Bytes data = random_values(d, count, 1000 + root);
        std::vector<Bytes> bufs(n, Bytes(count * dtype_size(d), 0x11));
        bufs[root] = data;
        parallel(n, [&](int r) { pgs[r]->broadcast(bufs[r].data(), count, d, root, "bc"); });
        for (int r = 0; r < n; ++r)
          ASSERT_EQ(bufs[r], data) << label(n, d, count, "bc") << " root " << root;
      }
    }
  }
}

TEST_P(GlooCollectives, BarrierWaitsForEveryone) {
  const int n = GetParam();
  ThreadWorld w(n);
  auto pgs = w.make_world();
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> arrived{0};
    std::atomic<bool> early{false};
    parallel(n, [&](int r) {
      // The last rank arrives late; nobody may leave before it arrived.
      if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      arrived++;
      pgs[r]->barrier("b" + std::to_string(round));
      if (arrived.load() != n) early = true;
    });
    EXPECT_FALSE(early.load());
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooCollectives, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(GlooCollectivesSingle, GroupOfOneNeedsNoStoreNorDevice) {
  GlooProcessGroup pg(nullptr, nullptr, world_group(1), 0);
  EXPECT_EQ(pg.size(), 1);
  EXPECT_EQ(pg.rank(), 0);
  std::vector<float> in{1.5f, -2.0f}, out(2);
  pg.all_gather(in.data(), out.data(), 2, DType::kFloat32, "ag");
  EXPECT_EQ(out, in);
  pg.reduce_scatter(in.data(), out.data(), 2, DType::kFloat32, ReduceOp::kPremulSum, 2.0, "rs");
  EXPECT_EQ(out, (std::vector<float>{3.0f, -4.0f}));
  pg.all_reduce(in.data(), 2, DType::kFloat32, ReduceOp::kAvg, 1.0, "ar");
  EXPECT_EQ(in, (std::vector<float>{1.5f, -2.0f}));
  pg.broadcast(in.data(), 2, DType::kFloat32, 0, "bc");
  pg.barrier("b");
}

TEST(GlooCollectivesSingle, BadArgumentsAreInternalErrors) {
  GlooProcessGroup pg(nullptr, nullptr, world_group(1), 0);
  std::vector<int64_t> v(2);
  EXPECT_THROW(pg.all_reduce(v.data(), 2, DType::kInt64, ReduceOp::kSum, 1.0, "x"), InternalError);
  EXPECT_THROW(pg.broadcast(v.data(), 2, DType::kInt64, 1, "x"), InternalError);
  EXPECT_THROW(GlooProcessGroup(nullptr, nullptr, world_group(2), 5), InternalError);
}

// bf16 sums round at every step: 1 + 2^-8 + 2^-8 is 1 in bf16 when added left to right, but
// the ring adds the two small values first for chunk 0 of three ranks (order 1, 2, 0).
TEST(GlooCollectivesSingle, Bf16SumRoundsOncePerRingStep) {
  ThreadWorld w(3);
  auto pgs = w.make_world();
  const uint16_t one = float_to_bf16(1.0f), tiny = float_to_bf16(std::ldexp(1.0f, -8));
  std::vector<std::vector<uint16_t>> in{{one, one, one}, {tiny, tiny, tiny}, {tiny, tiny, tiny}};
  std::vector<uint16_t> out(3, 0);
  parallel(3, [&](int r) {
    pgs[r]->reduce_scatter(in[r].data(), &out[r], 1, DType::kBFloat16, ReduceOp::kSum, 1, "rs");
  });
  // Rank 0's chunk: (tiny + tiny) + one = 1 + 2^-7, exact in bf16.
  EXPECT_EQ(bf16_to_float(out[0]), 1.0f + std::ldexp(1.0f, -7));
  // Rank 1's chunk: order 2, 0, 1: (tiny + one) rounds to 1, then + tiny rounds to 1.
  EXPECT_EQ(bf16_to_float(out[1]), 1.0f);
}

// Groups of a 2x2 mesh used concurrently: per rank, one thread runs the shard group's
// all-gather / reduce-scatter while another runs the replicate group's all-reduce.
TEST(GlooConcurrency, MeshGroupsFromDifferentThreads) {
  DeviceMesh mesh({2, 2}, {"replicate", "shard"});
  ThreadWorld w(4);
  auto shard = w.make_groups([&](int r) { return mesh.group(r, 1); });
  auto replicate = w.make_groups([&](int r) { return mesh.group(r, 0); });
  const size_t count = 257;
  const int iterations = 5;
  parallel(4, [&](int r) {
    std::thread other([&] {
      for (int it = 0; it < iterations; ++it) {
        std::vector<float> v(count, static_cast<float>(r + it));
        replicate[r]->all_reduce(v.data(), count, DType::kFloat32, ReduceOp::kSum, 1, "ar");
        // Replicate peers of r are r and r ^ 2.
        const float want = static_cast<float>(r + (r ^ 2) + 2 * it);
        for (float x : v) ASSERT_EQ(x, want);
      }
    });
    for (int it = 0; it < iterations; ++it) {
      const int idx = shard[r]->rank();
      std::vector<float> in(count, static_cast<float>(10 * r + it)), out(2 * count);
      shard[r]->all_gather(in.data(), out.data(), count, DType::kFloat32, "ag");
      for (int k = 0; k < 2; ++k)
        for (size_t j = 0; j < count; ++j)
          ASSERT_EQ(out[k * count + j], static_cast<float>(10 * shard[r]->group().ranks[k] + it));
      std::vector<float> rs_out(count);
      shard[r]->reduce_scatter(out.data(), rs_out.data(), count, DType::kFloat32, ReduceOp::kAvg, 1,
                               "rs");
      const float mean = static_cast<float>(10 * shard[r]->group().ranks[idx] + it);
      for (float x : rs_out) ASSERT_EQ(x, mean);
    }
    other.join();
  });
}

// Two instances over the same ranks (one per stream) run at the same time.
TEST(GlooConcurrency, TwoInstancesOfOneGroup) {
  ThreadWorld w(2);
  ProcessGroupOptions ag_opts, rs_opts;
  ag_opts.instance = "all_gather_stream";
  rs_opts.instance = "reduce_scatter_stream";
  auto ag = w.make_world(ag_opts);
  auto rs = w.make_world(rs_opts);
  parallel(2, [&](int r) {
    std::thread t([&] {
      for (int it = 0; it < 5; ++it) {
        std::vector<uint16_t> in(64, float_to_bf16(1.0f + r)), out(32);
        rs[r]->reduce_scatter(in.data(), out.data(), 32, DType::kBFloat16, ReduceOp::kSum, 1, "rs");
        for (auto x : out) ASSERT_EQ(bf16_to_float(x), 3.0f);
      }
    });
    for (int it = 0; it < 5; ++it) {
      int64_t mine = 100 + r, all[2];
      ag[r]->all_gather(&mine, all, 1, DType::kInt64, "ag");
      ASSERT_EQ(all[0], 100);
      ASSERT_EQ(all[1], 101);
    }
    t.join();
  });
}

// One TCP device shared by every rank of the process (and every group).
TEST(GlooConcurrency, OneDeviceForAllRanks) {
  ThreadWorld w(3);
  for (auto& d : w.devices) d = w.devices[0];
  auto pgs = w.make_world();
  std::vector<std::vector<float>> bufs(3, std::vector<float>(100));
  for (int r = 0; r < 3; ++r) bufs[r].assign(100, static_cast<float>(r));
  parallel(3, [&](int r) {
    pgs[r]->all_reduce(bufs[r].data(), 100, DType::kFloat32, ReduceOp::kMax, 1, "ar");
  });
  for (auto& b : bufs) EXPECT_EQ(b, std::vector<float>(100, 2.0f));
}

// Constructing the same group again on the same store meets under a new generation.
TEST(GlooConcurrency, RebuildingAGroupOnTheSameStore) {
  ThreadWorld w(3);
  for (int gen = 0; gen < 2; ++gen) {
    auto pgs = w.make_world();
    std::vector<int64_t> v{1, 2, 3};
    std::vector<std::vector<int64_t>> bufs(3, v);
    for (int r = 0; r < 3; ++r) bufs[r][0] = 7 * gen;
    parallel(3, [&](int r) { pgs[r]->broadcast(bufs[r].data(), 3, DType::kInt64, 0, "bc"); });
    for (auto& b : bufs) EXPECT_EQ(b[0], 7 * gen);
  }
}

TEST(GlooConcurrency, ConcurrentUseOfOneGroupIsRefused) {
  ThreadWorld w(2);
  auto pgs = w.make_world();
  std::string refused;
  parallel(2, [&](int r) {
    std::vector<float> v(4, 1.0f);
    if (r == 1) {
      // Rank 1 joins the all-reduce late, so rank 0's first thread is still inside it.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      pgs[1]->all_reduce(v.data(), 4, DType::kFloat32, ReduceOp::kSum, 1, "ar");
      return;
    }
    std::thread second([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::vector<float> u(4);
      try {
        pgs[0]->all_reduce(u.data(), 4, DType::kFloat32, ReduceOp::kSum, 1, "intruder");
      } catch (const CollectiveError& e) {
        refused = e.what();
      }
    });
    pgs[0]->all_reduce(v.data(), 4, DType::kFloat32, ReduceOp::kSum, 1, "ar");
    second.join();
    for (float x : v) EXPECT_EQ(x, 2.0f);
  });
  EXPECT_NE(refused.find("another thread"), std::string::npos) << refused;
  EXPECT_NE(refused.find("'intruder'"), std::string::npos) << refused;
}

// Random world size, count, dtype and op: reduce-scatter and all-reduce match the reference.
RC_GTEST_PROP(GlooCollectivesProp, ReductionsMatchReference, ()) {
  const int n = *rc::gen::inRange(1, 5);
  const size_t count = *rc::gen::inRange<size_t>(0, 40);
  const DType d = *rc::gen::elementOf(float_dtypes());
  const ReduceOp op = *rc::gen::elementOf(all_ops());
  const double scale = *rc::gen::elementOf(std::vector<double>{0.5, 0.1, 3.0, 1.0 / 7.0});
  const uint32_t seed = *rc::gen::arbitrary<uint32_t>();
  ThreadWorld w(n);
  auto pgs = w.make_world();
  const size_t es = dtype_size(d);
  std::vector<Bytes> rs_in(n), ar(n);
  for (int r = 0; r < n; ++r) {
    rs_in[r] = random_values(d, n * count, seed + r);
    ar[r] = random_values(d, count, seed + 100 + r);
  }
  const Bytes ar_expected = expected_all_reduce(d, op, scale, ar, count);
  std::vector<Bytes> rs_out(n, Bytes(count * es));
  parallel(n, [&](int r) {
    pgs[r]->reduce_scatter(rs_in[r].data(), rs_out[r].data(), count, d, op, scale, "rs");
    pgs[r]->all_reduce(ar[r].data(), count, d, op, scale, "ar");
  });
  for (int r = 0; r < n; ++r) {
    RC_ASSERT(rs_out[r] == expected_reduce_scatter(d, op, scale, rs_in, count, r));
    RC_ASSERT(ar[r] == ar_expected);
  }
}

}  // namespace
