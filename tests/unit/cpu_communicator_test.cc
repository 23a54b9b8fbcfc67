// NOTE [Rendezvous outside the lock] (backends/cpu/cpu_communicator.cc): two ranks whose streams
// meet a group for the first time in opposite orders both finish. Holding the groups' lock through
// a rendezvous deadlocked them (until the rendezvous timeout): the float8 all-gather's amax
// all-reduce on the copy-in stream racing the all-gather stream's first all-gather.
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/common/error.h"

using namespace fullshard;

namespace {

TEST(CpuCommunicator, StreamsMeetingAGroupInOppositeOrdersBothFinish) {
  auto store = std::make_shared<::gloo::rendezvous::HashStore>();
  ProcessGroup world;
  world.name = "world";
  world.ranks = {0, 1};
  std::vector<float> sums(4, 0.0f);
  std::vector<std::exception_ptr> errors(2);
  auto rank = [&](int r) {
    try {
      cpu::CpuBackendOptions o;
      o.rank = r;
      o.world_size = 2;
      o.store = store;
      o.device = gloo_backend::make_tcp_device();
      o.collectives.timeout = std::chrono::seconds(10);
      cpu::CpuBackend b(std::move(o));
      // Rank 0 meets the group on the copy-in stream first, rank 1 on the all-gather stream;
      // each stream's first collective rendezvouses while the other one's is still waiting.
      const StreamRole first = r == 0 ? StreamRole::kAllGatherCopyIn : StreamRole::kAllGather;
      const StreamRole second = r == 0 ? StreamRole::kAllGather : StreamRole::kAllGatherCopyIn;
      const TensorMeta m{DType::kFloat32, {1}};
      std::vector<Buffer> bufs;
      for (int i = 0; i < 2; ++i) {  // written before any collective: copy_from_host waits
        bufs.push_back(b.allocate(4, MemCategory::kTemporary, i == 0 ? first : second, "x"));
        const float v = static_cast<float>(r + 1);
        b.copy_from_host(TensorRef{bufs[i].id, 0, m}, &v);
      }
      for (int i = 0; i < 2; ++i) {
        CollectiveCall c;
        c.kind = CollectiveKind::kAllReduce;
        c.op = ReduceOp::kSum;
        c.name = i == 0 ? "first" : "second";
        c.input = c.output = TensorRef{bufs[i].id, 0, m};
        b.collective(i == 0 ? first : second, c, world);
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      }
      b.synchronize_device();
      for (int i = 0; i < 2; ++i) {
        float v = 0;
        b.copy_to_host(TensorRef{bufs[i].id, 0, m}, &v);
        sums[2 * r + i] = v;
        b.free(bufs[i]);
      }
    } catch (...) {
      errors[r] = std::current_exception();
    }
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (float s : sums) EXPECT_EQ(s, 3.0f);  // 1 + 2 on both streams of both ranks
}

}  // namespace
