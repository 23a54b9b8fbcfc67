// Host-only tests of the CUDA backend's runtime: everything here runs without a GPU or driver.
#include <gtest/gtest.h>
#include <gloo/rendezvous/hash_store.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "backends/cuda/device_process_group.h"
#include "backends/cuda/collective_transport.h"
#include "backends/cuda/deferred_frees.h"
#include "backends/cuda/device_probe.h"
#include "backends/cuda/nccl_args.h"
#include "backends/cuda/nccl_unique_id.h"
#include "backends/cuda/pinned_host.h"
#include "backends/cuda/staged_gloo_process_group.h"
#include "backends/cuda/stream_set.h"
#include "backends/cuda/stream_priority.h"
#include "backends/cuda/stream_times.h"
#include "backends/cuda/vmm_granularity.h"
#include "backends/cuda/watchdog_state.h"
#include "backends/gloo/process_group.h"
#include "core/common/error.h"
#include "core/report/step_breakdown.h"
#include "core/tensor/float_convert.h"

namespace fullshard::cuda {
namespace {

using std::chrono::milliseconds;

gloo_backend::CallInfo call(CollectiveKind kind, const std::string& name, uint64_t count = 1024,
                            DType dtype = DType::kBFloat16) {
  gloo_backend::CallInfo c;
  c.kind = kind;
  c.name = name;
  c.count = count;
  c.dtype = dtype;
  return c;
}

// ------------------------------------------------------------------ deferred pinned frees

// NOTE [No self-move] (backends/cuda/deferred_frees.h): every pattern of finished / pending entries
// up to 7 long, each entry with its own fence list: the finished ones are handed on in order with
// their fences, the pending ones kept in order with theirs intact (an entry kept in place used to
// lose its fences).
TEST(DeferredFrees, TakeFinishedKeepsPendingEntriesWhole) {
  struct Entry {
    int id;
    std::vector<int> fences;
  };
  for (int n = 0; n <= 7; ++n)
    for (unsigned pattern = 0; pattern < (1u << n); ++pattern) {
      std::vector<Entry> pending;
      for (int i = 0; i < n; ++i)
        pending.push_back({i, std::vector<int>(static_cast<size_t>(i + 1), 100 + i)});
      std::vector<Entry> taken;
      take_finished(
          pending, [&](const Entry& e) { return (pattern >> e.id) & 1u; },
          [&](Entry&& e) { taken.push_back(std::move(e)); });
      std::vector<int> want_taken, want_kept;
      for (int i = 0; i < n; ++i) ((pattern >> i) & 1u ? want_taken : want_kept).push_back(i);
      ASSERT_EQ(taken.size(), want_taken.size()) << "pattern " << pattern;
      ASSERT_EQ(pending.size(), want_kept.size()) << "pattern " << pattern;
      for (size_t k = 0; k < taken.size(); ++k) {
        EXPECT_EQ(taken[k].id, want_taken[k]);
        EXPECT_EQ(taken[k].fences,
                  std::vector<int>(static_cast<size_t>(taken[k].id + 1), 100 + taken[k].id));
      }
      for (size_t k = 0; k < pending.size(); ++k) {
        EXPECT_EQ(pending[k].id, want_kept[k]);
        EXPECT_EQ(pending[k].fences,
                  std::vector<int>(static_cast<size_t>(pending[k].id + 1), 100 + pending[k].id))
            << "pattern " << pattern << ": a pending entry lost its fences";
      }
    }
}

TEST(PinnedHostCache, SizesRoundToPowersOfTwoThenMiBMultiples) {
  constexpr uint64_t MiB = uint64_t{1} << 20;
  EXPECT_EQ(PinnedHostMemory::rounded_size(0), 512u);
  EXPECT_EQ(PinnedHostMemory::rounded_size(1), 512u);
  EXPECT_EQ(PinnedHostMemory::rounded_size(512), 512u);
  EXPECT_EQ(PinnedHostMemory::rounded_size(513), 1024u);
  EXPECT_EQ(PinnedHostMemory::rounded_size(MiB), MiB);
  EXPECT_EQ(PinnedHostMemory::rounded_size(MiB + 1), 2 * MiB);
  EXPECT_EQ(PinnedHostMemory::rounded_size(3 * MiB), 3 * MiB);  // was 4 MiB
  // A 5 GiB + 1 byte offloaded shard takes 5 GiB + 1 MiB, not 8 GiB.
  EXPECT_EQ(PinnedHostMemory::rounded_size((uint64_t{5} << 30) + 1), (uint64_t{5} << 30) + MiB);
  EXPECT_EQ(PinnedHostMemory::rounded_size(uint64_t{1} << 33), uint64_t{1} << 33);
  EXPECT_EQ(PinnedHostMemory::rounded_size(~uint64_t{0} - MiB), ~uint64_t{0} - MiB + 1);
  EXPECT_EQ(PinnedHostMemory::rounded_size(~uint64_t{0}), ~uint64_t{0});  // no overflow
  for (uint64_t b : {uint64_t{1}, uint64_t{4095}, MiB - 1, MiB + 7, uint64_t{3} << 40}) {
    const uint64_t r = PinnedHostMemory::rounded_size(b);
    EXPECT_GE(r, b);
    EXPECT_LT(r - b, std::max<uint64_t>(b, 512)) << b;  // never twice the request above 512 bytes
    EXPECT_EQ(PinnedHostMemory::rounded_size(r), r)
        << "a rounded size is its own size (cache reuse)";
  }
}

// ------------------------------------------------------------------ watchdog state machine

// NOTE [Staged gates and hardware queues] (backends/cuda/staged_gloo_process_group.h):
// CUDA_DEVICE_MAX_CONNECTIONS as CUDA reads it, and the backend's refusal of thread-ranks on one
// device whose streams outnumber the hardware queues.
TEST(StagedGates, DeviceMaxConnectionsAsCudaReadsIt) {
  EXPECT_EQ(cuda::device_max_connections(nullptr), 8);
  EXPECT_EQ(cuda::device_max_connections(""), 8);
  EXPECT_EQ(cuda::device_max_connections("abc"), 8);
  EXPECT_EQ(cuda::device_max_connections("16x"), 8);
  EXPECT_EQ(cuda::device_max_connections("1"), 1);
  EXPECT_EQ(cuda::device_max_connections("32"), 32);
  EXPECT_EQ(cuda::device_max_connections("64"), 32);
  EXPECT_EQ(cuda::device_max_connections("0"), 1);
}

TEST(StagedGates, ThreadRanksOnOneDeviceNeedAQueuePerStream) {
  const int streams = cuda::kCudaStreamCount;
  // One rank per process (fullshard train, compare): never refused, whatever the queues.
  EXPECT_EQ(cuda::shared_device_refusal(1, streams, 1, 0), "");
  // The GPU run: 2 thread-ranks (15 streams with the legacy one) and 4 (29) on 8 queues.
  const std::string two = cuda::shared_device_refusal(2, streams, 8, 0);
  EXPECT_NE(
      two.find(
          "2 ranks share GPU 0 in this process with 15 streams, more than its 8 hardware queues"),
      std::string::npos)
      << two;
  EXPECT_NE(cuda::shared_device_refusal(4, streams, 8, 3).find("GPU 3"), std::string::npos);
  // With CUDA_DEVICE_MAX_CONNECTIONS=32 (the GPU tests' main): up to 4 ranks, not 5.
  EXPECT_EQ(cuda::shared_device_refusal(2, streams, 32, 0), "");
  EXPECT_EQ(cuda::shared_device_refusal(4, streams, 32, 0), "");
  EXPECT_NE(cuda::shared_device_refusal(5, streams, 32, 0), "");
  EXPECT_NE(cuda::shared_device_fix(streams).find("up to 4 ranks per GPU"), std::string::npos);
  EXPECT_EQ(cuda::shared_device_refusal(2, streams, 32, 0).find('\n'), std::string::npos);
}

TEST(WatchdogState, CompletedCollectivesNeverTimeOut) {
  WatchdogState s(3);
  const auto t0 = WatchdogClock::time_point{};
  const uint64_t a = s.on_enqueue("0,1", "'shard' [0,1]", call(CollectiveKind::kAllGather, "l0 ag"),
                                  t0, milliseconds(100));
  s.on_complete(a);
  EXPECT_TRUE(s.on_tick(t0 + milliseconds(1000)).empty());
  EXPECT_FALSE(s.error().has_value());
  EXPECT_TRUE(s.pending().empty());
}

TEST(WatchdogState, DeadlineIsEnqueuePlusTimeout) {
  WatchdogState s(3);
  const auto t0 = WatchdogClock::time_point{} + milliseconds(5000);
  s.on_enqueue("0,1", "'shard' [0,1]",
               call(CollectiveKind::kReduceScatter, "layers.2 reduce_scatter"), t0,
               milliseconds(100));
  EXPECT_TRUE(s.on_tick(t0 + milliseconds(99)).empty());
  EXPECT_FALSE(s.error().has_value());
  const auto aborted = s.on_tick(t0 + milliseconds(100));
  ASSERT_EQ(aborted.size(), 1u);
  EXPECT_EQ(aborted[0], "0,1");
  ASSERT_TRUE(s.error().has_value());
  const std::string& m = *s.error();
  EXPECT_NE(m.find("rank 3"), std::string::npos) << m;
  EXPECT_NE(m.find("'shard' [0,1]"), std::string::npos) << m;
  EXPECT_NE(m.find("reduce_scatter 'layers.2 reduce_scatter' (1024 x bf16"), std::string::npos)
      << m;
  EXPECT_NE(m.find("timed out after 100 ms"), std::string::npos) << m;
  EXPECT_TRUE(s.aborted("0,1"));
  EXPECT_TRUE(s.pending().empty());
  // An aborted group is reported once.
  EXPECT_TRUE(s.on_tick(t0 + milliseconds(500)).empty());
}

TEST(WatchdogState, NamesTheOldestPendingCollectiveOfTheGroup) {
  WatchdogState s(0);
  const auto t0 = WatchdogClock::time_point{};
  s.on_enqueue("0,1", "'shard' [0,1]", call(CollectiveKind::kAllGather, "first"), t0,
               milliseconds(50));
  s.on_enqueue("0,1", "'shard' [0,1]", call(CollectiveKind::kAllGather, "second"),
               t0 + milliseconds(10), milliseconds(50));
  EXPECT_EQ(s.on_tick(t0 + milliseconds(70)).size(), 1u);  // one abort for the group, not two
  EXPECT_NE(s.error()->find("'first'"), std::string::npos) << *s.error();
  EXPECT_EQ(s.error()->find("'second'"), std::string::npos) << *s.error();
}

TEST(WatchdogState, FirstErrorWins) {
  WatchdogState s(1);
  const auto t0 = WatchdogClock::time_point{};
  s.on_enqueue("0,1", "'shard' [0,1]", call(CollectiveKind::kAllGather, "ag"), t0,
               milliseconds(1000));
  s.on_enqueue("1,3", "'replicate' [1,3]", call(CollectiveKind::kAllReduce, "ar"), t0,
               milliseconds(1000));
  EXPECT_TRUE(s.on_comm_error("1,3", "unhandled system error: remote process exited",
                              t0 + milliseconds(20)));
  EXPECT_FALSE(s.on_comm_error("1,3", "again", t0 + milliseconds(30)));  // aborted already
  EXPECT_EQ(s.on_tick(t0 + milliseconds(2000)).size(), 1u);  // the other group still times out...
  const std::string& m = *s.error();                         // ...but the first error is kept
  EXPECT_NE(m.find("all_reduce 'ar'"), std::string::npos) << m;
  EXPECT_NE(m.find("failed after 20 ms"), std::string::npos) << m;
  EXPECT_NE(m.find("remote process exited"), std::string::npos) << m;
  EXPECT_NE(m.find("'replicate' [1,3]"), std::string::npos) << m;
}

TEST(WatchdogState, CommErrorWithoutCollectiveNamesTheGroup) {
  WatchdogState s(2);
  s.on_enqueue("0,2", "'shard' [0,2]", call(CollectiveKind::kBroadcast, "b"), {}, milliseconds(10));
  s.on_complete(1);
  EXPECT_TRUE(
      s.on_comm_error("0,2", "ncclRemoteError", WatchdogClock::time_point{} + milliseconds(5)));
  EXPECT_NE(s.error()->find("no collective in flight"), std::string::npos) << *s.error();
  EXPECT_NE(s.error()->find("'shard' [0,2]"), std::string::npos) << *s.error();
}

TEST(WatchdogState, MarkAbortedDropsPendingAndKeepsFirstError) {
  WatchdogState s(0);
  s.fail("gloo: rank 0 ... connection closed");
  s.on_enqueue("0,1", "'shard' [0,1]", call(CollectiveKind::kAllGather, "ag"), {},
               milliseconds(10));
  s.mark_aborted("0,1");
  EXPECT_TRUE(s.pending().empty());
  EXPECT_TRUE(s.on_tick(WatchdogClock::time_point{} + milliseconds(100)).empty());
  EXPECT_EQ(*s.error(), "gloo: rank 0 ... connection closed");
}

TEST(WatchdogState, RejectsNonPositiveTimeout) {
  WatchdogState s(0);
  EXPECT_THROW(
      s.on_enqueue("0", "'x' [0]", call(CollectiveKind::kBarrier, "b"), {}, milliseconds(0)),
      InternalError);
}

// ------------------------------------------------------------------ CollectiveCall -> NCCL

TEST(NcclArgs, Datatypes) {
  EXPECT_EQ(nccl_dtype(DType::kFloat32), ncclFloat32);
  EXPECT_EQ(nccl_dtype(DType::kBFloat16), ncclBfloat16);
  EXPECT_EQ(nccl_dtype(DType::kFloat16), ncclFloat16);
  EXPECT_EQ(nccl_dtype(DType::kUInt8), ncclUint8);
  EXPECT_EQ(nccl_dtype(DType::kInt64), ncclInt64);
  EXPECT_TRUE(nccl_reducible(DType::kBFloat16));
  EXPECT_FALSE(nccl_reducible(DType::kUInt8));
}

TEST(NcclArgs, BuiltinOps) {
  EXPECT_EQ(nccl_reduction(ReduceOp::kSum, 1.0, DType::kFloat32).builtin, ncclSum);
  EXPECT_EQ(nccl_reduction(ReduceOp::kAvg, 1.0, DType::kBFloat16).builtin, ncclAvg);
  EXPECT_EQ(nccl_reduction(ReduceOp::kMax, 1.0, DType::kFloat16).builtin, ncclMax);
  EXPECT_FALSE(
      nccl_reduction(ReduceOp::kAvg, 0.5, DType::kFloat32).premul);  // scale only for premul
  EXPECT_THROW(nccl_reduction(ReduceOp::kSum, 1.0, DType::kInt64), InternalError);
}

TEST(NcclArgs, PremulSumScalarInTheReductionDtype) {
  const NcclReduction f = nccl_reduction(ReduceOp::kPremulSum, 0.25, DType::kFloat32);
  ASSERT_TRUE(f.premul);
  ASSERT_EQ(f.scalar_bytes, 4u);
  float fv = 0;
  std::memcpy(&fv, f.scalar.data(), 4);
  EXPECT_EQ(fv, 0.25f);

  const NcclReduction b = nccl_reduction(ReduceOp::kPremulSum, 1.0 / 3.0, DType::kBFloat16);
  ASSERT_TRUE(b.premul);
  ASSERT_EQ(b.scalar_bytes, 2u);
  uint16_t bv = 0;
  std::memcpy(&bv, b.scalar.data(), 2);
  EXPECT_EQ(bv, float_to_bf16(1.0f / 3.0f));
  EXPECT_NEAR(bf16_to_float(bv), 1.0 / 3.0, 1.0 / 256);

  const NcclReduction h = nccl_reduction(ReduceOp::kPremulSum, 0.125, DType::kFloat16);
  uint16_t hv = 0;
  std::memcpy(&hv, h.scalar.data(), 2);
  EXPECT_EQ(fp16_to_float(hv), 0.125f);
  // A scale of one is a plain sum: no per-call op.
  EXPECT_FALSE(nccl_reduction(ReduceOp::kPremulSum, 1.0, DType::kBFloat16).premul);
}

TensorRef ref(DType dt, int64_t n) {
  TensorRef r;
  r.buffer_id = 1;
  r.meta.dtype = dt;
  r.meta.shape = {n};
  return r;
}

TEST(CollectiveArgs, CountsFollowTheCpuBackend) {
  CollectiveCall ag;
  ag.kind = CollectiveKind::kAllGather;
  ag.name = "layers.0 all_gather";
  ag.input = ref(DType::kBFloat16, 10);
  ag.output = ref(DType::kBFloat16, 40);
  const CollectiveArgs a = decode_collective(ag, nullptr, nullptr, 4);
  EXPECT_EQ(a.count, 10u);
  EXPECT_EQ(a.input_bytes(4), 20u);
  EXPECT_EQ(a.output_bytes(4), 80u);

  CollectiveCall rs;
  rs.kind = CollectiveKind::kReduceScatter;
  rs.op = ReduceOp::kPremulSum;
  rs.scale = 0.5;
  rs.input = ref(DType::kFloat32, 40);
  rs.output = ref(DType::kFloat32, 10);
  const CollectiveArgs r = decode_collective(rs, nullptr, nullptr, 4);
  EXPECT_EQ(r.count, 10u);
  EXPECT_EQ(r.input_bytes(4), 160u);
  EXPECT_EQ(r.output_bytes(4), 40u);
  EXPECT_TRUE(r.info().has_op);
  EXPECT_EQ(r.info().op, ReduceOp::kPremulSum);
  EXPECT_DOUBLE_EQ(r.scale, 0.5);

  rs.input = ref(DType::kFloat32, 41);
  EXPECT_THROW(decode_collective(rs, nullptr, nullptr, 4), InternalError);
  CollectiveCall b;
  b.kind = CollectiveKind::kBroadcast;
  b.root = 4;
  b.input = b.output = ref(DType::kInt64, 3);
  EXPECT_THROW(decode_collective(b, nullptr, nullptr, 4), InternalError);
  b.root = 3;
  EXPECT_EQ(decode_collective(b, nullptr, nullptr, 4).info().root, 3);
}

// Expert parallelism's token all-to-all-v (NOTE [All-to-all over NCCL] in nccl_args.h): the
// split sizes decoded once fill a prefix of each buffer; NCCL gets a send and a receive per peer
// with a split, itself included, at the sum of the splits before it; the staged Gloo group lays
// the sent and the received splits side by side in its pinned staging.
TEST(NcclArgs, AllToAllSplitsBecomeSendsAndReceivesPerPeer) {
  CollectiveCall c;
  c.kind = CollectiveKind::kAllToAll;
  c.name = "layers.1.moe.experts dispatch";
  c.input = ref(DType::kBFloat16, 100);
  c.output = ref(DType::kBFloat16, 120);  // "max" receive buffers: the splits fill a prefix
  c.send_numels = {16, 0, 48, 8};
  c.recv_numels = {16, 32, 0, 40};
  const CollectiveArgs a = decode_collective(c, nullptr, nullptr, 4);
  EXPECT_EQ(a.input_bytes(4), 72u * 2);
  EXPECT_EQ(a.output_bytes(4), 88u * 2);
  const std::vector<NcclTransfer> t = nccl_all_to_all_transfers(a.send_counts, a.recv_counts);
  ASSERT_EQ(t.size(), 6u);  // the empty send to peer 1 and receive from peer 2 are skipped
  const NcclTransfer want[] = {{true, 0, 0, 16},   {false, 0, 0, 16}, {false, 1, 16, 32},
                               {true, 2, 16, 48},  {true, 3, 64, 8},  {false, 3, 48, 40}};
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(t[i].send, want[i].send) << i;
    EXPECT_EQ(t[i].peer, want[i].peer) << i;
    EXPECT_EQ(t[i].offset, want[i].offset) << i;
    EXPECT_EQ(t[i].count, want[i].count) << i;
  }
  EXPECT_TRUE(nccl_all_to_all_transfers({0, 0}, {0, 0}).empty());
  EXPECT_THROW(nccl_all_to_all_transfers({1, 2}, {1}), InternalError);

  const StagedAllToAll l = staged_all_to_all(a, 4);
  EXPECT_EQ(l.input_bytes, 144u);
  EXPECT_EQ(l.output_offset, 144u);  // already a multiple of 16
  EXPECT_EQ(l.output_bytes, 176u);
  EXPECT_EQ(l.total, 320u);
  c.send_numels = {3, 0, 0, 0};  // 6 bytes sent: the received splits start at byte 16
  const StagedAllToAll odd = staged_all_to_all(decode_collective(c, nullptr, nullptr, 4), 4);
  EXPECT_EQ(odd.output_offset, 16u);
  EXPECT_EQ(odd.total, 16u + 176u);
  // More than the buffers hold is a host-program bug, refused by the one decoding.
  c.recv_numels = {16, 32, 0, 80};
  EXPECT_THROW(decode_collective(c, nullptr, nullptr, 4), InternalError);
}

// ------------------------------------------------------------------ unique id keys

TEST(NcclUniqueId, KeysNameInstanceGroupAndGeneration) {
  ProcessGroup g{"shard", {0, 2, 4}};
  EXPECT_EQ(nccl_unique_id_key("default", g, 0), "nccl/default/0,2,4#0/unique_id");
  ProcessGroup other{"replicate", {0, 1}};
  EXPECT_NE(nccl_unique_id_key("default", g, 0), nccl_unique_id_key("default", other, 0));
  EXPECT_NE(nccl_unique_id_key("default", g, 0), nccl_unique_id_key("default", g, 1));
  EXPECT_NE(nccl_unique_id_key("a", g, 0), nccl_unique_id_key("b", g, 0));
}

TEST(NcclUniqueId, GenerationsCountPerStoreRankAndGroup) {
  auto s1 = std::make_shared<::gloo::rendezvous::HashStore>();
  auto s2 = std::make_shared<::gloo::rendezvous::HashStore>();
  ProcessGroup g{"shard", {0, 1}};
  EXPECT_EQ(next_unique_id_generation(s1, 0, "i", g), 0);
  EXPECT_EQ(next_unique_id_generation(s1, 0, "i", g), 1);
  EXPECT_EQ(next_unique_id_generation(s1, 1, "i", g), 0);  // another rank counts its own
  EXPECT_EQ(next_unique_id_generation(s2, 0, "i", g), 0);  // another store starts over
}

TEST(NcclUniqueId, ExchangeThroughTheStore) {
  ::gloo::rendezvous::HashStore store;
  ncclUniqueId id;
  for (size_t i = 0; i < sizeof id.internal; ++i) id.internal[i] = static_cast<char>(i * 7);
  exchange_unique_id(store, "k", true, id, milliseconds(100), "rank 0", 0);
  const ncclUniqueId got =
      exchange_unique_id(store, "k", false, ncclUniqueId{}, milliseconds(100), "rank 1", 0);
  EXPECT_EQ(std::memcmp(&got, &id, sizeof id), 0);
  try {
    exchange_unique_id(store, "missing", false, ncclUniqueId{}, milliseconds(50), "nccl: rank 1",
                       0);
    FAIL() << "expected a CollectiveError";
  } catch (const gloo_backend::CollectiveError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("nccl: rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find("'missing'"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
  }
  store.set("short", std::vector<char>(3));
  EXPECT_THROW(exchange_unique_id(store, "short", false, ncclUniqueId{}, milliseconds(50), "r", 0),
               gloo_backend::CollectiveError);
}

// ------------------------------------------------------------------ streams, granules, transport

TEST(StreamPriority, CommunicationStreamsHighAsFsdp2) {
  // H100's range: least 0, greatest -5.
  EXPECT_EQ(stream_priority(StreamRole::kAllGather, 0, -5), -1);
  EXPECT_EQ(stream_priority(StreamRole::kAllGatherCopyIn, 0, -5), -1);
  EXPECT_EQ(stream_priority(StreamRole::kReduceScatter, 0, -5), -1);
  EXPECT_EQ(stream_priority(StreamRole::kAllReduce, 0, -5), 0);  // FSDP2: normal priority
  EXPECT_EQ(stream_priority(StreamRole::kDefault, 0, -5), 0);
  EXPECT_EQ(stream_priority(StreamRole::kHostToDevice, 0, -5), 0);
  // A device without priorities (range [0, 0]) clamps to 0.
  EXPECT_EQ(stream_priority(StreamRole::kAllGather, 0, 0), 0);
}

TEST(VmmGranularity, PagesAreWholeGranules) {
  constexpr uint64_t MiB = 1 << 20;
  EXPECT_EQ(round_up_to_granule(1, 2 * MiB), 2 * MiB);
  EXPECT_EQ(round_up_to_granule(20 * MiB, 2 * MiB), 20 * MiB);
  EXPECT_TRUE(is_granule_aligned(40 * MiB, 20 * MiB, 2 * MiB));
  EXPECT_FALSE(is_granule_aligned(MiB, 2 * MiB, 2 * MiB));
  EXPECT_FALSE(is_granule_aligned(0, 0, 2 * MiB));
  EXPECT_NO_THROW(check_expandable_granularity(2 * MiB, "H100"));
  EXPECT_NO_THROW(check_expandable_granularity(64 * 1024, "small"));
  try {
    check_expandable_granularity(4 * MiB, "Future GPU");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "hardware.allocator.expandable_segments");
    EXPECT_NE(std::string(e.what()).find("4194304"), std::string::npos) << e.what();
  }
}

TEST(CollectiveTransport, DefaultNcclGlooWhenRanksShareAGpu) {
  EXPECT_EQ(choose_transport(std::nullopt, 8, 8, "--collectives").transport,
            CollectiveTransport::kNccl);
  const TransportChoice shared = choose_transport(std::nullopt, 2, 1, "--collectives");
  EXPECT_EQ(shared.transport, CollectiveTransport::kGloo);
  EXPECT_NE(shared.reason.find("2 local ranks on 1 visible GPU"), std::string::npos)
      << shared.reason;
  EXPECT_EQ(choose_transport(CollectiveTransport::kGloo, 1, 1, "x").transport,
            CollectiveTransport::kGloo);
  try {
    choose_transport(CollectiveTransport::kNccl, 2, 1, "--collectives");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "--collectives");
  }
  EXPECT_EQ(parse_transport("gloo", "x"), CollectiveTransport::kGloo);
  EXPECT_THROW(parse_transport("mpi", "--collectives"), InputError);
}

TEST(DeviceProbe, LocalRankWrapsAroundSharedGpus) {
  EXPECT_EQ(device_for_local_rank(3, 8), 3);
  EXPECT_EQ(device_for_local_rank(1, 1), 0);
  EXPECT_EQ(device_for_local_rank(5, 2), 1);
  EXPECT_THROW(device_for_local_rank(0, 0), InternalError);
  EXPECT_GE(gpu_count(), 0);  // never throws, also without a driver
}

// NOTE [Measured stream times on the GPU] (backends/cuda/stream_times.h): event readings (ms after
// the anchor) become host-clock seconds; a collective is in its stream's busy list and in the
// collectives with the very same numbers (what measured_step_breakdown matches compute-stream
// collectives by); work starts only when asked for; kernel times always; an end read before its
// begin is the begin.
TEST(StreamTimes, EventReadingsBecomeTheBackendsMeasurements) {
  const std::vector<TimedWork> work = {
      {StreamRole::kDefault, 7, "", 0.0f, 10.0f},         // a kernel, 0-10 ms
      {StreamRole::kAllGather, 8, "shard", 5.0f, 15.0f},  // an all-gather, 5-15 ms
      {StreamRole::kDefault, 9, "shard", 20.0f, 22.0f},   // clip's all-reduce on the compute stream
      {StreamRole::kDefault, 10, "", 30.0f, 29.9995f},    // end read before begin
  };
  const double anchor = 100.0;
  const StreamTimes t = assemble_stream_times(work, anchor, true);
  const auto& compute = t.busy[static_cast<size_t>(StreamRole::kDefault)];
  ASSERT_EQ(compute.size(), 3u);
  EXPECT_DOUBLE_EQ(compute[0].first, 100.0);
  EXPECT_NEAR(compute[0].second, 100.010, 1e-9);
  EXPECT_EQ(compute[2].first, compute[2].second);
  ASSERT_EQ(t.busy[static_cast<size_t>(StreamRole::kAllGather)].size(), 1u);
  ASSERT_EQ(t.collectives.size(), 2u);
  EXPECT_EQ(t.collectives[1].group, "shard");
  EXPECT_EQ(t.collectives[1].stream, StreamRole::kDefault);
  EXPECT_EQ(t.collectives[1].begin_s, compute[1].first);  // bit for bit
  EXPECT_EQ(t.collectives[1].end_s, compute[1].second);
  ASSERT_EQ(t.starts.size(), 4u);
  EXPECT_EQ(t.starts[1].first, 8u);
  EXPECT_TRUE(assemble_stream_times(work, anchor, false).starts.empty());
  // Per-op times: the kernels alone, each with its launch's seq, on the same clock, whether or
  // not starts were asked for (NOTE [Per-op times]).
  for (const StreamTimes& k : {t, assemble_stream_times(work, anchor, false)}) {
    ASSERT_EQ(k.kernels.size(), 2u);
    EXPECT_EQ(k.kernels[0].seq, 7u);
    EXPECT_EQ(k.kernels[0].begin_s, compute[0].first);
    EXPECT_EQ(k.kernels[0].end_s, compute[0].second);
    EXPECT_EQ(k.kernels[1].seq, 10u);
    EXPECT_EQ(k.kernels[1].end_s, k.kernels[1].begin_s);
  }

  // Through the runner's split: compute 10 ms (kernels only), communication 10 + 2 ms, of
  // which 5 (the all-gather after the kernel) + 2 (the all-reduce) are exposed.
  const StepBreakdown b = measured_step_breakdown(t.busy, anchor, anchor + 0.040, t.collectives);
  EXPECT_NEAR(b.compute_s, 0.010, 1e-6);
  EXPECT_NEAR(b.comm_s, 0.012, 1e-6);
  EXPECT_NEAR(b.exposed_comm_s, 0.007, 1e-6);
}

TEST(StreamTimes, EnvironmentSwitch) {
  EXPECT_TRUE(parse_stream_times(nullptr));
  EXPECT_TRUE(parse_stream_times(""));
  EXPECT_TRUE(parse_stream_times("on"));
  EXPECT_TRUE(parse_stream_times("1"));
  EXPECT_FALSE(parse_stream_times("off"));
  EXPECT_FALSE(parse_stream_times("0"));
  try {
    parse_stream_times("yes");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("FULLSHARD_CUDA_STREAM_TIMES"), std::string::npos) << m;
    EXPECT_NE(m.find("'yes'"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace fullshard::cuda
