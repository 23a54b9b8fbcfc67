// Point-to-point send / recv of GlooProcessGroup (NOTE [Gloo send / recv]): ranks as threads
// over one store. A send meets the recv of the same peer and tag, in issue order; the other
// members take no part; collectives on the same group keep working around transfers; a recv
// no one sends times out naming the peer and the transfer.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "tests/unit/gloo_test_support.h"

using namespace fullshard;
using namespace fullshard::gloo_test;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

// Every dtype: what rank 0 sends is what rank 2 receives, while rank 1 (not involved) only
// joins the all_reduce after; the transfers do not shift the collectives' slots.
TEST(GlooSendRecv, SendReachesItsPeerOnlyAndCollectivesGoOn) {
  ThreadWorld w(3);
  auto pgs = w.make_world();
  for (DType d : all_dtypes()) {
    SCOPED_TRACE(std::string(dtype_name(d)));
    const size_t n = 1000;
    const Bytes sent = random_values(d, n, 7);
    std::vector<Bytes> got(3, Bytes(n * dtype_size(d), 0xAB));
    std::vector<std::vector<float>> sums(3, std::vector<float>(5, 1.0f));
    parallel(3, [&](int r) {
      if (r == 0) pgs[0]->send(sent.data(), n, d, 2, 0, "act");
      if (r == 2) pgs[2]->recv(got[2].data(), n, d, 0, 0, "act");
      pgs[r]->all_reduce(sums[r].data(), 5, DType::kFloat32, ReduceOp::kSum, 1.0, "after");
    });
    EXPECT_EQ(got[2], sent);
    EXPECT_EQ(got[1], Bytes(n * dtype_size(d), 0xAB));  // rank 1 received nothing
    for (int r = 0; r < 3; ++r) EXPECT_EQ(sums[r], std::vector<float>(5, 3.0f));
  }
}

// A pipeline's pattern: several transfers in one direction, each tagged with its index, and
// transfers back on another group; each recv gets the send of its tag.
TEST(GlooSendRecv, TaggedTransfersArriveInOrderBothWays) {
  ThreadWorld w(2);
  auto fwd = w.make_groups([](int) { return world_group(2, "pipeline p2p F 0->1"); });
  auto bwd = w.make_groups([](int) { return ProcessGroup{"pipeline p2p B 1->0", {1, 0}}; });
  const int m = 6;
  std::vector<std::vector<float>> acts(m), grads(m);
  parallel(2, [&](int r) {
    std::vector<float> buf(64);
    for (int i = 0; i < m; ++i) {
      if (r == 0) {
        std::vector<float> a(64, static_cast<float>(i) + 0.5f);
        fwd[0]->send(a.data(), a.size(), DType::kFloat32, 1, i, "act");
        bwd[0]->recv(buf.data(), buf.size(), DType::kFloat32, 0, i, "grad");
        grads[i] = buf;
      } else {
        fwd[1]->recv(buf.data(), buf.size(), DType::kFloat32, 0, i, "act");
        acts[i] = buf;
        std::vector<float> g(64, -static_cast<float>(i));
        bwd[1]->send(g.data(), g.size(), DType::kFloat32, 1, i, "grad");
      }
    }
  });
  for (int i = 0; i < m; ++i) {
    EXPECT_EQ(acts[i], std::vector<float>(64, static_cast<float>(i) + 0.5f)) << i;
    EXPECT_EQ(grads[i], std::vector<float>(64, -static_cast<float>(i))) << i;
  }
}

// A recv whose tag no one sends fails within the timeout on both ends, naming the transfer and
// the peer; an empty transfer moves nothing and needs no peer. Rank 0 sends only after rank 1's
// recv has timed out: Gloo closes a pair when one of its waits times out, so with both waits
// running the end that times out first decides whether the other reads "timed out" or "closed"
// (CI's TSan run saw the send win).
TEST(GlooSendRecv, UnmatchedTagTimesOutNamingThePeer) {
  ThreadWorld w(2);
  ProcessGroupOptions o;
  o.timeout = std::chrono::milliseconds(800);
  auto pgs = w.make_world(o);
  std::vector<std::string> errors(2);
  std::promise<void> recv_done;
  std::shared_future<void> recv_failed = recv_done.get_future().share();
  parallel(2, [&](int r) {
    std::vector<float> v(16, 1.0f);
    pgs[r]->send(v.data(), 0, DType::kFloat32, 1 - r, 9, "empty");  // no data, no wait
    try {
      if (r == 0) {
        recv_failed.wait();
        pgs[0]->send(v.data(), v.size(), DType::kFloat32, 1, 3, "act");
      } else {
        try {
          pgs[1]->recv(v.data(), v.size(), DType::kFloat32, 0, 4, "act");
        } catch (...) {
          recv_done.set_value();
          throw;
        }
        recv_done.set_value();
      }
    } catch (const CollectiveError& e) {
      errors[r] = e.what();
    }
  });
  SCOPED_TRACE(errors[0] + "\n" + errors[1]);
  EXPECT_TRUE(has(errors[0], "send 'act' (16 x fp32, to member 1, tag 3) failed"));
  EXPECT_TRUE(has(errors[1], "recv 'act' (16 x fp32, from member 0, tag 4) failed"));
  EXPECT_TRUE(has(errors[1], "timed out after 800 ms receiving from rank 0"));
}

TEST(GlooSendRecv, PeerMustBeAnotherMember) {
  ThreadWorld w(2);
  auto pgs = w.make_world();
  std::vector<float> v(4);
  EXPECT_THROW(pgs[0]->send(v.data(), 4, DType::kFloat32, 0, 0, "self"), InternalError);
  EXPECT_THROW(pgs[0]->recv(v.data(), 4, DType::kFloat32, 2, 0, "outside"), InternalError);
  GlooProcessGroup one(nullptr, nullptr, world_group(1), 0);
  EXPECT_THROW(one.send(v.data(), 4, DType::kFloat32, 0, 0, "alone"), InternalError);
}
