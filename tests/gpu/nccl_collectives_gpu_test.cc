// GPU tests of NcclProcessGroup and the watchdog: every collective kind and dtype with one rank
// (any GPU), and, with two GPUs, two ranks as threads over a HashStore, including a collective
// whose peer never comes (the watchdog aborts it; nothing hangs).
#include <cuda_runtime_api.h>
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "backends/cuda/device_process_group.h"
#include "backends/cuda/device_probe.h"
#include "backends/cuda/nccl_process_group.h"
#include "backends/cuda/stream_set.h"
#include "backends/cuda/watchdog.h"
#include "backends/gloo/process_group.h"
#include "core/common/error.h"
#include "core/tensor/float_convert.h"
#include "tests/gpu/gpu_test_main.h"

namespace fullshard::cuda {
namespace {

using std::chrono::milliseconds;

struct DeviceFloats {
  float* p = nullptr;
  size_t n = 0;
  explicit DeviceFloats(const std::vector<float>& h) : n(h.size()) {
    cudaMalloc(&p, n * sizeof(float));
    cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  }
  ~DeviceFloats() { cudaFree(p); }
  std::vector<float> read() const {
    std::vector<float> h(n);
    cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
  }
};

CollectiveArgs args(CollectiveKind k, size_t count, void* in, void* out,
                    ReduceOp op = ReduceOp::kSum, double scale = 1.0, DType dt = DType::kFloat32) {
  CollectiveArgs a;
  a.kind = k;
  a.count = count;
  a.dtype = dt;
  a.op = op;
  a.scale = scale;
  a.name = "test";
  a.input = in;
  a.output = out;
  return a;
}

TEST(NcclProcessGroup, OneRankEveryKind) {
  int dev = 0;
  cudaGetDevice(&dev);
  StreamSet streams;
  auto pg = std::make_shared<NcclProcessGroup>(nullptr, ProcessGroup{"solo", {0}}, 0);
  cudaStream_t s = streams.get(StreamRole::kAllGather);
  DeviceFloats in({1, 2, 3, 4}), out({0, 0, 0, 0});
  pg->run(args(CollectiveKind::kAllGather, 4, in.p, out.p), s);
  cudaStreamSynchronize(s);
  EXPECT_EQ(out.read(), (std::vector<float>{1, 2, 3, 4}));

  DeviceFloats rs_out({0, 0, 0, 0});
  pg->run(args(CollectiveKind::kReduceScatter, 4, in.p, rs_out.p, ReduceOp::kPremulSum, 0.5), s);
  cudaStreamSynchronize(s);
  EXPECT_EQ(rs_out.read(), (std::vector<float>{0.5f, 1, 1.5f, 2}));

  pg->run(args(CollectiveKind::kAllReduce, 4, in.p, out.p, ReduceOp::kAvg), s);
  pg->run(args(CollectiveKind::kBroadcast, 4, nullptr, out.p), s);
  pg->run(args(CollectiveKind::kBarrier, 0, nullptr, nullptr), s);
  cudaStreamSynchronize(s);
  EXPECT_EQ(out.read(), (std::vector<float>{1, 2, 3, 4}));

  // All-to-all-v with one member: a send and a receive to itself (NOTE [All-to-all over NCCL]),
  // the split filling a prefix of a larger output.
  DeviceFloats a2a_out({0, 0, 0, 0, 0, 0});
  CollectiveArgs a2a = args(CollectiveKind::kAllToAll, 4, in.p, a2a_out.p);
  a2a.send_counts = {3};
  a2a.recv_counts = {3};
  pg->run(a2a, s);
  cudaStreamSynchronize(s);
  EXPECT_EQ(a2a_out.read(), (std::vector<float>{1, 2, 3, 0, 0, 0}));

  // bf16 premul-sum: the scale is applied in bf16 (NOTE [Reductions on NCCL]).
  std::vector<uint16_t> hb = {float_to_bf16(2), float_to_bf16(4)}, ob(2);
  uint16_t* db = nullptr;
  cudaMalloc(&db, 4);
  cudaMemcpy(db, hb.data(), 4, cudaMemcpyHostToDevice);
  pg->run(args(CollectiveKind::kAllReduce, 2, db, db, ReduceOp::kPremulSum, 0.25, DType::kBFloat16),
          s);
  cudaStreamSynchronize(s);
  cudaMemcpy(ob.data(), db, 4, cudaMemcpyDeviceToHost);
  EXPECT_EQ(bf16_to_float(ob[0]), 0.5f);
  EXPECT_EQ(bf16_to_float(ob[1]), 1.0f);
  cudaFree(db);
  EXPECT_EQ(pg->async_error(), ncclSuccess);
}

// NCCL send / recv (what the CUDA backend's pipeline stages will run): a peer must be another
// member; with two GPUs, rank 0 sends two buffers to rank 1 and gets one back, in issue order.
TEST(NcclProcessGroup, SendRecvBetweenTwoRanks) {
  {
    StreamSet streams;
    NcclProcessGroup solo(nullptr, ProcessGroup{"solo", {0}}, 0);
    DeviceFloats b({1});
    EXPECT_THROW(solo.send(b.p, 1, DType::kFloat32, 0, streams.get(StreamRole::kDefault), "self"),
                 InternalError);
  }
  if (gpu_count() < 2) GTEST_SKIP() << "needs two GPUs (NCCL refuses two ranks on one device)";
  auto store = std::make_shared<::gloo::rendezvous::HashStore>();
  const ProcessGroup g{"pipeline p2p F 0->1", {0, 1}};
  std::vector<float> got1a, got1b, got0;
  auto run = [&](int r) {
    cudaSetDevice(r);
    StreamSet streams;
    NcclProcessGroup pg(store, g, r);
    cudaStream_t s = streams.get(StreamRole::kDefault);
    if (r == 0) {
      DeviceFloats a({1, 2, 3}), b({4, 5, 6}), back({0, 0});
      pg.send(a.p, 3, DType::kFloat32, 1, s, "act 0");
      pg.send(b.p, 3, DType::kFloat32, 1, s, "act 1");
      pg.recv(back.p, 2, DType::kFloat32, 1, s, "grad 0");
      cudaStreamSynchronize(s);
      got0 = back.read();
    } else {
      DeviceFloats a({0, 0, 0}), b({0, 0, 0}), grad({-1, -2});
      pg.recv(a.p, 3, DType::kFloat32, 0, s, "act 0");
      pg.recv(b.p, 3, DType::kFloat32, 0, s, "act 1");
      pg.send(grad.p, 2, DType::kFloat32, 0, s, "grad 0");
      cudaStreamSynchronize(s);
      got1a = a.read();
      got1b = b.read();
    }
  };
  std::thread rank1(run, 1);
  run(0);
  rank1.join();
  EXPECT_EQ(got1a, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(got1b, (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(got0, (std::vector<float>{-1, -2}));
}

TEST(CollectiveWatchdog, CompletedCollectivesLeaveNoError) {
  int dev = 0;
  cudaGetDevice(&dev);
  StreamSet streams;
  EventPool events;
  CollectiveWatchdog wd(0, dev, events, milliseconds(5));
  auto pg = std::make_shared<NcclProcessGroup>(nullptr, ProcessGroup{"solo", {0}}, 0);
  wd.watch(pg);
  DeviceFloats buf({1, 2});
  cudaStream_t s = streams.get(StreamRole::kAllReduce);
  for (int i = 0; i < 5; ++i) {
    const CollectiveArgs a = args(CollectiveKind::kAllReduce, 2, buf.p, buf.p);
    pg->run(a, s);
    wd.track(pg, a, s, milliseconds(10000));
  }
  cudaStreamSynchronize(s);
  for (int i = 0; i < 200 && wd.pending() > 0; ++i) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(wd.pending(), 0u);
  EXPECT_FALSE(wd.error().has_value());
  EXPECT_NO_THROW(wd.check());
}

// Two ranks, one GPU each, as threads: rank 1 creates the communicator but never issues the
// all-reduce rank 0 issues. Rank 0's watchdog aborts the communicator when the deadline passes;
// the host's wait on the collective's event returns; the error names rank, collective, group.
TEST(CollectiveWatchdog, AbortsACollectiveWhosePeerNeverComes) {
  if (gpu_count() < 2) GTEST_SKIP() << "needs two GPUs (NCCL refuses two ranks on one device)";
  auto store = std::make_shared<::gloo::rendezvous::HashStore>();
  const ProcessGroup g{"shard", {0, 1}};
  std::string error0;
  bool waited = false;
  std::thread rank1([&] {
    cudaSetDevice(1);
    NcclProcessGroupOptions o;
    o.timeout = milliseconds(20000);
    NcclProcessGroup pg(store, g, 1, o);
    std::this_thread::sleep_for(milliseconds(4000));  // alive, but silent
    pg.abort();
  });
  {
    cudaSetDevice(0);
    StreamSet streams;
    EventPool events;
    CollectiveWatchdog wd(0, 0, events, milliseconds(10));
    NcclProcessGroupOptions o;
    o.timeout = milliseconds(20000);
    auto pg = std::make_shared<NcclProcessGroup>(store, g, 0, o);
    wd.watch(pg);
    DeviceFloats buf({1, 2, 3});
    cudaStream_t s = streams.get(StreamRole::kAllReduce);
    const CollectiveArgs a = args(CollectiveKind::kAllReduce, 3, buf.p, buf.p);
    const auto t0 = std::chrono::steady_clock::now();
    pg->run(a, s);
    wd.track(pg, a, s, milliseconds(500));
    cudaEvent_t after = events.acquire();
    cudaEventRecord(after, s);
    cudaEventSynchronize(after);  // returns once the watchdog aborted the communicator
    waited = std::chrono::steady_clock::now() - t0 < milliseconds(3500);
    cudaGetLastError();
    for (int i = 0; i < 100 && !wd.error(); ++i) std::this_thread::sleep_for(milliseconds(10));
    if (wd.error()) error0 = *wd.error();
    EXPECT_TRUE(pg->aborted());
    EXPECT_THROW(wd.check(), gloo_backend::CollectiveError);
  }
  rank1.join();
  EXPECT_TRUE(waited);
  EXPECT_NE(error0.find("rank 0"), std::string::npos) << error0;
  EXPECT_NE(error0.find("all_reduce 'test' (3 x fp32"), std::string::npos) << error0;
  EXPECT_NE(error0.find("'shard' [0,1]"), std::string::npos) << error0;
  EXPECT_NE(error0.find("timed out"), std::string::npos) << error0;
}

TEST(NcclProcessGroup, CreationFailsWhenAMemberNeverComes) {
  auto store = std::make_shared<::gloo::rendezvous::HashStore>();
  NcclProcessGroupOptions o;
  o.timeout = milliseconds(300);
  // Rank 1 of {0, 1} waits for rank 0's unique id, which never comes.
  try {
    NcclProcessGroup pg(store, ProcessGroup{"shard", {0, 1}}, 1, o);
    FAIL() << "expected a CollectiveError";
  } catch (const gloo_backend::CollectiveError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("nccl: rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find("unique id of rank 0"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace fullshard::cuda
