// NOTE [Measured timeline times] on the CPU backend: work the host issues runs later on its
// stream; take_work_starts() says when, so an allocation made while a slow kernel still runs is
// placed when the work issued after it started, not when the host made it.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "core/report/timeline_times.h"

using namespace fullshard;

namespace {

// Token data whose reads take 150 ms: a kLoadBatch that keeps its stream busy.
class SlowTokens final : public TokenSource {
 public:
  int64_t size() const override { return 1000; }
  void read(int64_t offset, int64_t n, int64_t* out) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    for (int64_t i = 0; i < n; ++i) out[i] = (offset + i) % 256;
  }
  void check_vocab(int64_t, const std::string&) const override {}
  std::string describe() const override { return "slow"; }
};

OpCall load_op(const Buffer& tokens, const Buffer& labels) {
  OpCall op;
  op.kind = OpKind::kLoadBatch;
  op.name = "load";
  const TensorMeta m{DType::kInt64, {1, 4}};
  op.outputs = {TensorRef{tokens.id, 0, m}, TensorRef{labels.id, 0, m}};
  op.iargs = {0, 0, 1};
  return op;
}

}  // namespace

TEST(CpuTimeline, APointIsPlacedWhenTheWorkIssuedAfterItStarted) {
  cpu::CpuBackendOptions o;
  o.batches.tokens = std::make_shared<SlowTokens>();
  cpu::CpuBackend b(std::move(o));
  std::vector<uint64_t> seqs;
  std::vector<double> host;
  b.set_allocation_observer([&](const Buffer&, bool, std::string_view) {
    seqs.push_back(b.host_seq());
    host.push_back(b.clock_s());
  });
  const Buffer t1 = b.allocate(32, MemCategory::kActivation, StreamRole::kDefault, "tokens 1");
  const Buffer l1 = b.allocate(32, MemCategory::kActivation, StreamRole::kDefault, "labels 1");
  b.launch(StreamRole::kDefault, load_op(t1, l1));  // 150 ms on the compute stream
  const Buffer t2 = b.allocate(32, MemCategory::kActivation, StreamRole::kDefault,
                               "tokens 2");  // at once on the host
  const Buffer l2 = b.allocate(32, MemCategory::kActivation, StreamRole::kDefault, "labels 2");
  b.launch(StreamRole::kDefault, load_op(t2, l2));  // starts after the first load
  b.synchronize_device();
  b.set_allocation_observer(nullptr);
  const auto busy = b.take_busy_intervals();
  ASSERT_TRUE(busy.has_value());
  const auto& compute = (*busy)[static_cast<size_t>(StreamRole::kDefault)];
  ASSERT_EQ(compute.size(), 2u);
  const std::vector<double> t = timeline_stream_times(seqs, host, b.take_work_starts());
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0], compute[0].first);  // the first load's start, as the stream measured it
  EXPECT_EQ(t[1], compute[0].first);
  EXPECT_EQ(t[2], compute[1].first);  // the second load's start: after the first ended
  EXPECT_GE(t[2], compute[0].second);
  EXPECT_GE(t[2] - host[2], 0.1);  // the host made it ~150 ms earlier
  b.free(t1), b.free(l1), b.free(t2), b.free(l2);
}
