// GPU tests of StagedGlooProcessGroup: two ranks as threads sharing one GPU over a HashStore
// (what NCCL refuses), every collective kind on device tensors, in stream order; and a peer
// that never comes: the error is reported and the stream does not hang.
#include <cuda_runtime_api.h>
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/cuda/device_process_group.h"
#include "backends/cuda/pinned_host.h"
#include "backends/cuda/staged_gloo_process_group.h"
#include "backends/cuda/stream_set.h"
#include "backends/gloo/process_group.h"
#include "tests/gpu/gpu_test_main.h"

namespace fullshard::cuda {
namespace {

using std::chrono::milliseconds;

CollectiveArgs args(CollectiveKind k, size_t count, const void* in, void* out,
                    ReduceOp op = ReduceOp::kSum, double scale = 1.0) {
  CollectiveArgs a;
  a.kind = k;
  a.count = count;
  a.dtype = DType::kFloat32;
  a.op = op;
  a.scale = scale;
  a.name = "staged";
  a.input = in;
  a.output = out;
  return a;
}

struct RankResult {
  std::vector<float> all_gather, reduce_scatter, all_reduce, broadcast, all_to_all;
  std::string error;
};

void run_rank(int rank, int device, std::shared_ptr<::gloo::rendezvous::Store> store,
              RankResult& out) {
  cudaSetDevice(device);
  StreamSet streams;
  EventPool events;
  PinnedHostMemory pinned(events, streams.all());
  std::mutex mu;
  const ProcessGroup g{"shard", {0, 1}};
  gloo_backend::ProcessGroupOptions o;
  o.timeout = milliseconds(20000);
  StagedGlooProcessGroup pg(store, gloo_backend::make_tcp_device(), g, rank, device, o, pinned,
                            events, [&](const std::string& m) {
                              std::lock_guard<std::mutex> lock(mu);
                              if (out.error.empty()) out.error = m;
                            });
  float* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), 64 * sizeof(float));
  const float base = rank == 0 ? 1.0f : 10.0f;
  std::vector<float> h = {base, base + 1, base + 2, base + 3};
  cudaStream_t s = streams.get(StreamRole::kAllGather);
  // d[0..2): AG input; d[2..6): AG output; d[8..12): RS input; d[12..14): RS output;
  // d[16..20): AR in place; d[20..23): broadcast from group rank 1.
  cudaMemcpyAsync(d, h.data(), 2 * sizeof(float), cudaMemcpyHostToDevice, s);
  cudaMemcpyAsync(d + 8, h.data(), 4 * sizeof(float), cudaMemcpyHostToDevice, s);
  cudaMemcpyAsync(d + 16, h.data(), 4 * sizeof(float), cudaMemcpyHostToDevice, s);
  cudaMemcpyAsync(d + 20, h.data(), 3 * sizeof(float), cudaMemcpyHostToDevice, s);
  pg.run(args(CollectiveKind::kAllGather, 2, d, d + 2), s);
  pg.run(args(CollectiveKind::kReduceScatter, 2, d + 8, d + 12, ReduceOp::kPremulSum, 0.5), s);
  pg.run(args(CollectiveKind::kAllReduce, 4, d + 16, d + 16, ReduceOp::kAvg), s);
  CollectiveArgs b = args(CollectiveKind::kBroadcast, 3, d + 20, d + 20);
  b.root = 1;
  pg.run(b, s);
  // All-to-all-v (expert parallelism's dispatch): d[24..28) in, d[32..37) out; rank 0 sends 1
  // element to itself and 3 to rank 1, rank 1 sends 2 to rank 0 and 2 to itself.
  cudaMemcpyAsync(d + 24, h.data(), 4 * sizeof(float), cudaMemcpyHostToDevice, s);
  CollectiveArgs a2a = args(CollectiveKind::kAllToAll, 4, d + 24, d + 32);
  a2a.send_counts = rank == 0 ? std::vector<size_t>{1, 3} : std::vector<size_t>{2, 2};
  a2a.recv_counts = rank == 0 ? std::vector<size_t>{1, 2} : std::vector<size_t>{3, 2};
  pg.run(a2a, s);
  pg.run(args(CollectiveKind::kBarrier, 0, nullptr, nullptr), s);
  std::vector<float> all(40);
  cudaMemcpyAsync(all.data(), d, 40 * sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);  // the host never blocked before this point
  out.all_gather.assign(all.begin() + 2, all.begin() + 6);
  out.reduce_scatter.assign(all.begin() + 12, all.begin() + 14);
  out.all_reduce.assign(all.begin() + 16, all.begin() + 20);
  out.broadcast.assign(all.begin() + 20, all.begin() + 23);
  out.all_to_all.assign(all.begin() + 32, all.begin() + (rank == 0 ? 35 : 37));
  EXPECT_GT(pg.staging_bytes(), 0u);
  cudaFree(d);
}

TEST(StagedGlooProcessGroup, TwoRanksShareOneGpu) {
  int dev = 0;
  cudaGetDevice(&dev);
  auto store = std::make_shared<::gloo::rendezvous::HashStore>();
  RankResult r0, r1;
  std::thread t1([&] { run_rank(1, dev, store, r1); });
  run_rank(0, dev, store, r0);
  t1.join();
  for (const RankResult* r : {&r0, &r1}) {
    EXPECT_EQ(r->error, "");
    EXPECT_EQ(r->all_gather, (std::vector<float>{1, 2, 10, 11}));
    EXPECT_EQ(r->all_reduce, (std::vector<float>{5.5f, 6.5f, 7.5f, 8.5f}));
    EXPECT_EQ(r->broadcast, (std::vector<float>{10, 11, 12}));
  }
  // Rank r gets chunk r of 0.5 * (rank0 + rank1): chunk 0 = {5.5, 6.5}, chunk 1 = {7.5, 8.5}.
  EXPECT_EQ(r0.reduce_scatter, (std::vector<float>{5.5f, 6.5f}));
  EXPECT_EQ(r1.reduce_scatter, (std::vector<float>{7.5f, 8.5f}));
  EXPECT_EQ(r0.all_to_all, (std::vector<float>{1, 10, 11}));
  EXPECT_EQ(r1.all_to_all, (std::vector<float>{2, 3, 4, 12, 13}));
}

TEST(StagedGlooProcessGroup, PeerThatNeverComesFailsWithoutHanging) {
  int dev = 0;
  cudaGetDevice(&dev);
  auto store = std::make_shared<::gloo::rendezvous::HashStore>();
  StreamSet streams;
  EventPool events;
  PinnedHostMemory pinned(events, streams.all());
  std::string error;
  std::mutex mu;
  gloo_backend::ProcessGroupOptions o;
  o.timeout = milliseconds(500);
  {
    StagedGlooProcessGroup pg(store, gloo_backend::make_tcp_device(), ProcessGroup{"shard", {0, 1}},
                              0, dev, o, pinned, events, [&](const std::string& m) {
                                std::lock_guard<std::mutex> lock(mu);
                                if (error.empty()) error = m;
                              });
    float* d = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&d), 16);
    cudaStream_t s = streams.get(StreamRole::kReduceScatter);
    pg.run(args(CollectiveKind::kAllReduce, 4, d, d), s);
    pg.run(args(CollectiveKind::kAllReduce, 4, d, d), s);  // skipped after the failure
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(10000));
    EXPECT_TRUE(pg.failed());
    cudaFree(d);
  }
  EXPECT_NE(error.find("rank 0"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;  // the member that did not come
}

}  // namespace
}  // namespace fullshard::cuda
