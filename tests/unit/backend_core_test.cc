// What both real backends share (backends/common): buffer addresses, the event table, the
// measurement store, the host fills and the scalar reads.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/common/buffer_addresses.h"
#include "backends/common/device_kernels.h"
#include "backends/common/event_table.h"
#include "backends/common/failure_state.h"
#include "backends/common/host_fills.h"
#include "backends/common/measurements.h"
#include "backends/common/scalar_read.h"
#include "core/common/error.h"
#include "core/runtime/op_table.h"
#include "core/data/param_init.h"
#include "core/tensor/float_convert.h"

namespace fullshard::backends {
namespace {

Buffer buffer(uint64_t id, bool on_host) {
  Buffer b;
  b.id = id;
  b.bytes = 64;
  b.on_host = on_host;
  return b;
}

TensorRef ref(uint64_t id, uint64_t offset, DType dt = DType::kFloat32, int64_t n = 1) {
  return TensorRef{id, offset, TensorMeta{dt, {n}}};
}

TEST(BufferAddresses, ResolvesOffsetsAndRefusesFreedBuffers) {
  uint8_t device[64], host[64];
  BufferAddresses a;
  a.add(buffer(3, false), device);
  a.add(buffer(4, true), host);
  EXPECT_EQ(a.pointer(ref(3, 8)), device + 8);
  EXPECT_FALSE(a.resolve(ref(3, 8)).on_host);
  EXPECT_TRUE(a.resolve(ref(4, 0)).on_host);
  // Buffer 0 is an empty tensor: no address, no error.
  EXPECT_EQ(a.pointer(ref(0, 0)), nullptr);
  const auto removed = a.remove(3);
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->ptr, device);
  EXPECT_FALSE(a.remove(3).has_value());
  try {
    a.resolve(ref(3, 0));
    ADD_FAILURE() << "no error";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor of freed buffer 3 used"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(a.size(), 1u);
}

TEST(EventTable, IdsAreNeverReusedAndPrunedEventsAreGone) {
  EventTable<int> t;
  const EventId a = t.add(10), b = t.add(11), c = t.add(12);
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 2u);
  EXPECT_EQ(c, 3u);
  EXPECT_EQ(t.find(0), nullptr);
  t.prune([&](EventId id, int e) {
    EXPECT_EQ(static_cast<int>(id) + 9, e);
    return e != 11;
  });
  EXPECT_EQ(t.find(a), nullptr);
  ASSERT_NE(t.find(b), nullptr);
  EXPECT_EQ(*t.find(b), 11);
  EXPECT_EQ(t.add(13), 4u);  // after a prune: still a new id
  // An exception in the predicate leaves the event in place.
  EXPECT_THROW(t.prune([](EventId, int) -> bool { throw std::runtime_error("query failed"); }),
               std::runtime_error);
  EXPECT_EQ(t.size(), 2u);
  std::vector<int> released;
  t.clear([&](int e) { released.push_back(e); });
  EXPECT_EQ(released.size(), 2u);
  EXPECT_EQ(t.size(), 0u);
}

// As NOTE [One record per timed work] (backends/common/measurements.h): a kernel is a busy interval
// and a kernel time; a collective a busy interval and a collective interval with the very same
// numbers; starts only when asked.
TEST(Measurements, OneRecordPerTimedWork) {
  MeasurementStore s;
  const std::string shard = "shard";
  s.add(StreamRole::kDefault, 7, nullptr, 1.0, 2.0, false);
  s.add(StreamRole::kAllGather, 8, &shard, 1.5, 3.0, true);
  Measurements more;
  more.add(StreamRole::kDefault, 9, nullptr, 4.0, 5.0, true);
  s.append(std::move(more));

  const StreamIntervals busy = s.take_busy();
  const auto& compute = busy[static_cast<size_t>(StreamRole::kDefault)];
  ASSERT_EQ(compute.size(), 2u);
  EXPECT_EQ(compute[1], std::make_pair(4.0, 5.0));
  const auto& ag = busy[static_cast<size_t>(StreamRole::kAllGather)];
  ASSERT_EQ(ag.size(), 1u);

  const auto collectives = s.take_collectives();
  ASSERT_EQ(collectives.size(), 1u);
  EXPECT_EQ(collectives[0].group, "shard");
  EXPECT_EQ(collectives[0].stream, StreamRole::kAllGather);
  EXPECT_EQ(collectives[0].begin_s, ag[0].first);
  EXPECT_EQ(collectives[0].end_s, ag[0].second);

  const auto kernels = s.take_kernels();
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].seq, 7u);
  EXPECT_EQ(kernels[1].seq, 9u);

  const auto starts = s.take_starts();
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[0], std::make_pair(uint64_t{8}, 1.5));
  EXPECT_EQ(starts[1], std::make_pair(uint64_t{9}, 4.0));

  // Every take clears what it returned.
  EXPECT_TRUE(s.take_busy()[static_cast<size_t>(StreamRole::kDefault)].empty());
  EXPECT_TRUE(s.take_collectives().empty());
  EXPECT_TRUE(s.take_kernels().empty());
  EXPECT_TRUE(s.take_starts().empty());

  const double t0 = s.clock_s();
  EXPECT_GE(t0, 0.0);
  EXPECT_GE(s.clock_s(), t0);
}

TEST(ScalarRead, FloatingDtypesWidenExactly) {
  const float f = 0.15625f;
  EXPECT_EQ(decode_scalar(&f, DType::kFloat32), 0.15625);
  const uint16_t b = float_to_bf16(-3.5f);
  EXPECT_EQ(decode_scalar(&b, DType::kBFloat16), -3.5);
  const uint16_t h = float_to_fp16(1.0f / 1024);
  EXPECT_EQ(decode_scalar(&h, DType::kFloat16), 1.0 / 1024);
  const int64_t i = 3;
  EXPECT_THROW(decode_scalar(&i, DType::kInt64), InternalError);
  EXPECT_THROW(check_scalar_dtype(DType::kUInt8), InternalError);
}

TEST(HostFills, RunTheHostDefinitionsOfLoadBatchAndInitParam) {
  BatchSource batches;
  batches.corpus = std::make_shared<TextCorpus>(TextCorpus::generated(5, 1 << 14));
  batches.seed = 5;
  OpCall load;
  load.kind = OpKind::kLoadBatch;
  load.name = "batch";
  load.outputs = {ref(1, 0, DType::kInt64, 2 * 16), ref(2, 0, DType::kInt64, 2 * 16)};
  load.outputs[0].meta.shape = load.outputs[1].meta.shape = {2, 16};
  load.iargs = {0, 0, 1};
  std::vector<int64_t> tokens(32, -1), labels(32, -1), want_t(32, -2), want_l(32, -2);
  const HostFillContext ctx{&batches, 1, 2};
  ASSERT_TRUE(run_host_fill(load, ctx, {tokens.data(), labels.data()}));
  batches.fill(load, 1, 2, want_t.data(), want_l.data());
  EXPECT_EQ(tokens, want_t);
  EXPECT_EQ(labels, want_l);

  OpCall init;
  init.kind = OpKind::kInitParam;
  init.name = "p";
  init.outputs = {ref(1, 0, DType::kFloat32, 4 * 5)};
  init.iargs = {3, 3, 5, 0, 4242};  // as data_param_init_test's Shard(0) layout
  init.fargs = {0.02};
  std::vector<float> got(20, -1.0f);
  ASSERT_TRUE(run_host_fill(init, ctx, {got.data()}));
  const std::vector<float> want = init_param_values(init);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * sizeof(float)));

  OpCall other;
  other.kind = OpKind::kFill;
  EXPECT_FALSE(is_host_fill(other.kind));
  EXPECT_FALSE(run_host_fill(other, ctx, {}));
}

TEST(FailureState, FirstErrorWins) {
  FailureState f;
  EXPECT_NO_THROW(f.rethrow_if_failed());
  f.fail(std::make_exception_ptr(std::runtime_error("first")));
  f.fail(std::make_exception_ptr(std::runtime_error("second")));
  EXPECT_TRUE(f.failed());
  try {
    f.rethrow_if_failed();
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first");
  }
}

// The op table's kOpSimulatedOnly kinds are refused on the host before a real device queues
// anything, naming the backend; every other kind passes the check (the kernels decide).
TEST(BackendCore, SimulatedOnlyKindsAreRefusedBeforeTheQueue) {
  int refused = 0;
  for (size_t i = 0; i < kOpKindCount; ++i) {
    OpCall op;
    op.kind = static_cast<OpKind>(i);
    op.name = "x";
    if (!op_info(op.kind).has(kOpSimulatedOnly)) {
      EXPECT_NO_THROW(check_runs_on_device(op, "the CPU backend", &has_device_kernel))
          << op_kind_name(op.kind);
      continue;
    }
    try {
      check_runs_on_device(op, "the CUDA backend", &has_device_kernel);
      ADD_FAILURE() << op_kind_name(op.kind) << " was not refused";
    } catch (const InternalError& e) {
      EXPECT_NE(std::string(e.what()).find("not supported on the CUDA backend"), std::string::npos)
          << e.what();
      ++refused;
    }
  }
  EXPECT_EQ(refused, 2);  // async TP's two collective matmuls: no backend runs them
}

// A device kind a backend's own list leaves out (the CUDA backend's MoE and float8 kinds) is
// refused the same way, naming that backend.
bool lacks_grouped_mm(OpKind k) { return has_device_kernel(k) && k != OpKind::kGroupedMM; }

TEST(BackendCore, KindsABackendLacksAreRefusedBeforeTheQueue) {
  OpCall op;
  op.kind = OpKind::kGroupedMM;
  op.name = "experts";
  EXPECT_NO_THROW(check_runs_on_device(op, "the CPU backend", &has_device_kernel));
  try {
    check_runs_on_device(op, "the CUDA backend", &lacks_grouped_mm);
    ADD_FAILURE() << "kGroupedMM was not refused";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("not supported on the CUDA backend"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fullshard::backends
