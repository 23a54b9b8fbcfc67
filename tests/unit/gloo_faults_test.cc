// Failures of GlooProcessGroup with ranks as threads: a member that never joins the group or
// never arrives at a collective makes the others throw CollectiveError within the timeout,
// naming the collective; mismatched collectives are caught by the fingerprint check.
// (A peer process killed mid-collective: gloo_multiprocess_test.cc.)
#include <gtest/gtest.h>

#include <gloo/rendezvous/file_store.h>
#include <stdlib.h>

#include <filesystem>
#include <latch>

#include "tests/unit/gloo_test_support.h"

using namespace fullshard;
using namespace fullshard::gloo_test;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

ProcessGroupOptions short_timeout() {
  ProcessGroupOptions o;
  o.timeout = std::chrono::milliseconds(1000);
  return o;
}

TEST(GlooFaults, MemberThatNeverJoinsFailsTheRendezvous) {
  ThreadWorld w(3);
  std::vector<std::string> errors(3);
  std::vector<double> elapsed(3, 0);
  parallel(2, [&](int r) {  // rank 2 never constructs its group
    const auto t0 = Clock::now();
    try {
      GlooProcessGroup pg(w.store, w.devices[r], world_group(3, "shard"), r, short_timeout());
    } catch (const CollectiveError& e) {
      errors[r] = e.what();
    }
    elapsed[r] = seconds_since(t0);
  });
  for (int r = 0; r < 2; ++r) {
    std::printf("%s\n", errors[r].c_str());
    SCOPED_TRACE(errors[r]);
    EXPECT_TRUE(has(errors[r], "gloo: rank " + std::to_string(r)));
    EXPECT_TRUE(has(errors[r], "group 'shard' [0,1,2]"));
    EXPECT_TRUE(has(errors[r], "rendezvous"));
    EXPECT_TRUE(has(errors[r], "rank 2 did not join within 1000 ms"));
    EXPECT_LT(elapsed[r], 3.0);
  }
}

TEST(GlooFaults, MemberThatNeverArrivesTimesOutTheCollective) {
  ThreadWorld w(3);
  auto pgs = w.make_world(short_timeout());
  std::vector<std::string> errors(3), later(3);
  std::vector<double> elapsed(3, 0);
  std::latch done(2);
  parallel(3, [&](int r) {
    if (r == 2) {  // alive and connected, but never issues the collective
      done.wait();
      return;
    }
    std::vector<uint16_t> in(3 * 64), out(64);
    const auto t0 = Clock::now();
    try {
      pgs[r]->reduce_scatter(in.data(), out.data(), 64, DType::kBFloat16, ReduceOp::kAvg, 1,
                             "layers.0");
    } catch (const CollectiveError& e) {
      errors[r] = e.what();
    }
    elapsed[r] = seconds_since(t0);
    // The group is broken now: the next collective fails at once, naming the first failure.
    try {
      pgs[r]->barrier("after");
    } catch (const CollectiveError& e) {
      later[r] = e.what();
    }
    done.count_down();
  });
  for (int r = 0; r < 2; ++r) {
    std::printf("%s\n", errors[r].c_str());
    SCOPED_TRACE(errors[r]);
    EXPECT_TRUE(has(errors[r], "gloo: rank " + std::to_string(r) + " (member " + std::to_string(r) +
                                   " of group 'world' [0,1,2])"));
    EXPECT_TRUE(has(errors[r], "reduce_scatter 'layers.0' (64 x bf16, avg) failed"));
    EXPECT_LT(elapsed[r], 2.5);
    EXPECT_TRUE(has(later[r], "barrier 'after' cannot run: the group failed earlier"));
    EXPECT_TRUE(has(later[r], "layers.0"));
  }
  // Rank 0 waits on its left neighbour, rank 2, and times out on it.
  EXPECT_TRUE(has(errors[0], "timed out after 1000 ms receiving from rank 2")) << errors[0];
}

TEST(GlooFaults, FingerprintMismatchNamesTheRankAndBothCalls) {
  ThreadWorld w(2);
  ProcessGroupOptions o = short_timeout();
  o.check_fingerprints = true;
  auto pgs = w.make_world(o);
  std::vector<std::string> errors(2);
  parallel(2, [&](int r) {
    std::vector<uint16_t> a(2048), b(1024);
    try {
      if (r == 0)
        pgs[r]->all_gather(a.data(), b.data(), 512, DType::kBFloat16, "layers.1");
      else
        pgs[r]->reduce_scatter(a.data(), b.data(), 1024, DType::kBFloat16, ReduceOp::kSum, 1,
                               "layers.0");
    } catch (const CollectiveError& e) {
      errors[r] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    std::printf("%s\n", errors[r].c_str());
    SCOPED_TRACE(errors[r]);
    EXPECT_TRUE(has(errors[r], "gloo: rank " + std::to_string(r)));
    EXPECT_TRUE(has(errors[r],
                    "rank 1 issued reduce_scatter 'layers.0' (1024 x bf16, sum) while "
                    "rank 0 issued all_gather 'layers.1' (512 x bf16)"));
  }
  // Every member saw the mismatch; the transport is intact and the group still works.
  std::vector<float> v(2, 1.0f), u(2, 2.0f);
  parallel(2, [&](int r) {
    auto& buf = r == 0 ? v : u;
    pgs[r]->all_reduce(buf.data(), 2, DType::kFloat32, ReduceOp::kSum, 1, "ok");
  });
  EXPECT_EQ(v, (std::vector<float>{3.0f, 3.0f}));
  EXPECT_EQ(u, v);
}

TEST(GlooFaults, FingerprintMismatchOfCountOpRootAndLongNames) {
  ThreadWorld w(3);
  ProcessGroupOptions o = short_timeout();
  o.check_fingerprints = true;
  auto pgs = w.make_world(o);
  std::vector<std::string> errors(3);
  auto expect_all = [&](const std::string& part) {
    for (int r = 0; r < 3; ++r) EXPECT_TRUE(has(errors[r], part)) << errors[r];
  };
  auto run = [&](const std::function<void(int)>& fn) {
    errors.assign(3, "");
    parallel(3, [&](int r) {
      try {
        fn(r);
      } catch (const CollectiveError& e) {
        errors[r] = e.what();
      }
    });
  };
  std::vector<float> buf(64);
  std::vector<std::vector<float>> out(3, std::vector<float>(3 * 64));
  // Count differs on rank 2.
  run([&](int r) {
    pgs[r]->all_gather(buf.data(), out[r].data(), r == 2 ? 10 : 12, DType::kFloat32, "p");
  });
  expect_all(
      "rank 2 issued all_gather 'p' (10 x fp32) while rank 0 issued all_gather 'p' (12 x fp32)");
  // Op differs on rank 1.
  run([&](int r) {
    std::vector<float> v(4);
    pgs[r]->all_reduce(v.data(), 4, DType::kFloat32, r == 1 ? ReduceOp::kMax : ReduceOp::kSum, 1,
                       "norm");
  });
  expect_all(
      "rank 1 issued all_reduce 'norm' (4 x fp32, max) while rank 0 issued all_reduce "
      "'norm' (4 x fp32, sum)");
  // Broadcast root differs.
  run([&](int r) {
    std::vector<int64_t> v(2);
    pgs[r]->broadcast(v.data(), 2, DType::kInt64, r == 0 ? 0 : 1, "seed");
  });
  expect_all(
      "rank 1 issued broadcast 'seed' (2 x int64, root 1) while rank 0 issued broadcast "
      "'seed' (2 x int64, root 0)");
  // Names that differ only past the 39 bytes a fingerprint carries are still told apart.
  const std::string base(45, 'x');
  run([&](int r) { pgs[r]->barrier(base + (r == 2 ? "B" : "A")); });
  expect_all("rank 2 issued barrier '" + base.substr(0, 39) + "...' while rank 0 issued barrier '" +
             base.substr(0, 39) + "...'");
  // Matching calls pass the check.
  run([&](int r) { pgs[r]->barrier("same"); });
  expect_all("");
  for (auto& e : errors) EXPECT_EQ(e, "");
}

// A FileStore directory that still holds an earlier job's keys: gloo's FileStore refuses to
// overwrite them (GLOO_ENFORCE, an EnforceNotMet, not a gloo::Exception); that must still come
// out as a CollectiveError.
TEST(GlooFaults, StaleStoreDirectoryIsACollectiveError) {
  std::string templ = (std::filesystem::temp_directory_path() / "fullshard-gloo-XXXXXX").string();
  const std::string dir = mkdtemp(templ.data());
  ThreadWorld w(2);
  for (int r = 0; r < 2; ++r)
    w.rank_stores.push_back(std::make_shared<::gloo::rendezvous::FileStore>(dir));
  { auto first_job = w.make_world(short_timeout()); }
  // A second job on the same directory, through a new store object (as a new process would).
  auto store = std::make_shared<::gloo::rendezvous::FileStore>(dir);
  std::string error;
  try {
    GlooProcessGroup pg(store, w.devices[0], world_group(2), 0, short_timeout());
  } catch (const CollectiveError& e) {
    error = e.what();
  }
  std::filesystem::remove_all(dir);
  std::printf("%s\n", error.c_str());
  EXPECT_TRUE(has(error, "gloo: rank 0 (member 0 of group 'world' [0,1]): rendezvous")) << error;
  EXPECT_TRUE(has(error, "cannot publish this rank's arrival")) << error;
  EXPECT_TRUE(has(error, "File already exists")) << error;
}

}  // namespace
