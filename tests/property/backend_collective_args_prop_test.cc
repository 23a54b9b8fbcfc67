// NOTE [One collective decoding] (backends/common/collective_args.h): every kind, dtype and group
// size decodes to the counts and byte sizes the NOTE states, every shape that does not fit is
// refused naming the collective, and the decoded args run on a real one-rank Gloo group.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/common/collective_args.h"
#include "backends/common/gloo_collective_group.h"
#include "core/common/error.h"

namespace fullshard::backends {
namespace {

const std::vector<CollectiveKind> kKinds = {
    CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce,
    CollectiveKind::kBroadcast, CollectiveKind::kBarrier};
const std::vector<DType> kDtypes = {DType::kFloat32, DType::kBFloat16, DType::kFloat16,
                                    DType::kUInt8, DType::kInt64};

// Addresses as numbers (rapidcheck prints the values of a failed assertion).
uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TensorRef ref(uint64_t id, DType dt, size_t n) {
  return TensorRef{id, 0, TensorMeta{dt, {static_cast<int64_t>(n)}}};
}

ProcessGroup group_of(int size) {
  ProcessGroup g;
  g.name = "shard";
  for (int r = 0; r < size; ++r) g.ranks.push_back(r);
  return g;
}

// A call of `kind` that fits a group of `w`, `count` elements a rank.
CollectiveCall fitting(CollectiveKind kind, DType dt, int w, size_t count) {
  CollectiveCall c;
  c.kind = kind;
  c.name = "layers.1 " + std::string(collective_name(kind));
  const auto n = static_cast<size_t>(w);
  switch (kind) {
    case CollectiveKind::kAllGather:
      c.input = ref(1, dt, count);
      c.output = ref(2, dt, count * n);
      break;
    case CollectiveKind::kReduceScatter:
      c.input = ref(1, dt, count * n);
      c.output = ref(2, dt, count);
      break;
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBroadcast: c.input = c.output = ref(1, dt, count); break;
    case CollectiveKind::kBarrier: break;
  }
  return c;
}

void expect_refused(const CollectiveCall& c, int w, const std::string& words) {
  try {
    decode_collective(c, nullptr, nullptr, w);
    RC_FAIL("decoded: " + words);
  } catch (const InternalError& e) {
    const std::string m = e.what();
    RC_ASSERT(m.find(words) != std::string::npos);
    if (w >= 1) RC_ASSERT(m.find("'" + c.name + "'") != std::string::npos);
  }
}

RC_GTEST_PROP(DecodeCollective, FittingCallsDecodeAsTheNoteSays, ()) {
  const CollectiveKind kind = *rc::gen::elementOf(kKinds);
  const DType dt = *rc::gen::elementOf(kDtypes);
  const int w = *rc::gen::inRange(1, 9);
  const auto count = static_cast<size_t>(*rc::gen::inRange(0, 65));
  CollectiveCall c = fitting(kind, dt, w, count);
  c.op = *rc::gen::element(ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kPremulSum, ReduceOp::kMax);
  c.scale = 0.25;
  c.root = *rc::gen::inRange(0, w);
  int in = 0, out = 0;
  const CollectiveArgs a = decode_collective(c, &in, &out, w);
  RC_ASSERT(a.kind == kind);
  RC_ASSERT(addr(a.input) == addr(&in));
  RC_ASSERT(addr(a.output) == addr(&out));
  RC_ASSERT(a.name == c.name);
  if (kind == CollectiveKind::kBarrier) {
    RC_ASSERT(a.count == 0u);
    RC_ASSERT(a.input_bytes(w) == 0u);
    RC_ASSERT(a.output_bytes(w) == 0u);
  } else {
    RC_ASSERT(a.count == count);
    RC_ASSERT(a.dtype == dt);
    RC_ASSERT(a.input_bytes(w) == c.input.nbytes());
    RC_ASSERT(a.output_bytes(w) == c.output.nbytes());
  }
  const gloo_backend::CallInfo info = a.info();
  const bool reduces = kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllReduce;
  RC_ASSERT(info.has_op == reduces);
  RC_ASSERT(info.root == (kind == CollectiveKind::kBroadcast ? c.root : -1));
}

RC_GTEST_PROP(DecodeCollective, CallsThatDoNotFitAreRefusedNamingTheCollective, ()) {
  const CollectiveKind kind = *rc::gen::elementOf(kKinds);
  const DType dt = *rc::gen::elementOf(kDtypes);
  const int w = *rc::gen::inRange(1, 9);
  const auto count = static_cast<size_t>(*rc::gen::inRange(1, 65));
  CollectiveCall c = fitting(kind, dt, w, count);
  expect_refused(c, 0, "over an empty group");
  if (kind == CollectiveKind::kBarrier) return;  // no data: nothing else to get wrong

  CollectiveCall mixed = c;
  mixed.input.meta.dtype =
      *rc::gen::suchThat(rc::gen::elementOf(kDtypes), [&](DType d) { return d != dt; });
  expect_refused(mixed, w, "input and output dtypes differ");

  const int delta = *rc::gen::element(-1, 1, 3);
  CollectiveCall sized = c;
  switch (kind) {
    case CollectiveKind::kAllGather:
      sized.output = ref(2, dt, count * static_cast<size_t>(w) + delta);
      expect_refused(sized, w, "output must hold group size x input elements");
      break;
    case CollectiveKind::kReduceScatter:
      sized.input = ref(1, dt, count * static_cast<size_t>(w) + delta);
      expect_refused(sized, w, "input must hold group size x output elements");
      break;
    case CollectiveKind::kAllReduce:
      sized.input = ref(3, dt, count + delta);
      expect_refused(sized, w, "input and output sizes differ");
      break;
    case CollectiveKind::kBroadcast:
      sized.root = *rc::gen::element(-1, w, w + 5);
      expect_refused(sized, w, "root outside the group");
      break;
    case CollectiveKind::kBarrier: break;
  }
}

RC_GTEST_PROP(PlanCollective, AllReduceOfADistinctInputCopiesItFirst, ()) {
  const int w = *rc::gen::inRange(1, 9);
  const auto count = static_cast<size_t>(*rc::gen::inRange(0, 65));
  const CollectiveCall c = fitting(CollectiveKind::kAllReduce, DType::kFloat32, w, count);
  const ProcessGroup g = group_of(w);
  const int rank = *rc::gen::inRange(0, w);
  float a = 0, b = 0;
  const CollectivePlan distinct = plan_collective(c, g, rank, &a, &b);
  RC_ASSERT(addr(distinct.copy_from) == addr(&a));
  RC_ASSERT(distinct.copy_bytes == c.output.nbytes());
  RC_ASSERT(addr(distinct.args.input) == addr(&b));  // then in place
  const CollectivePlan same = plan_collective(c, g, rank, &b, &b);
  RC_ASSERT(addr(same.copy_from) == 0u);
  RC_ASSERT(same.copy_bytes == 0u);
  // Other kinds never copy.
  const CollectiveCall ag = fitting(CollectiveKind::kAllGather, DType::kFloat32, w, count);
  RC_ASSERT(plan_collective(ag, g, rank, &a, &b).copy_bytes == 0u);
  // A rank outside the group is refused.
  try {
    plan_collective(c, g, w, &a, &b);
    RC_FAIL("planned on a group without this rank");
  } catch (const InternalError& e) {
    RC_ASSERT(std::string(e.what()).find("on a group without this rank") != std::string::npos);
  }
}

// The args run on a real Gloo group of one rank (no store, no network): every kind lands in the
// output as a one-member collective must (all_reduce and broadcast in place on the output).
RC_GTEST_PROP(GlooCollectiveGroup, RunsDecodedArgsOnOneRank, ()) {
  const CollectiveKind kind = *rc::gen::elementOf(kKinds);
  const bool reduces = kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllReduce;
  const DType dt = reduces ? DType::kFloat32 : *rc::gen::elementOf(kDtypes);
  const auto count = static_cast<size_t>(*rc::gen::inRange(1, 33));
  CollectiveCall c = fitting(kind, dt, 1, count);
  c.op = *rc::gen::element(ReduceOp::kSum, ReduceOp::kAvg);
  const size_t bytes = count * dtype_size(dt);
  std::vector<uint8_t> in(bytes), out(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<uint8_t>(i % 61);
  if (dt == DType::kFloat32)  // small whole numbers: exact under sum / avg of one
    for (size_t i = 0; i < count; ++i) {
      const float v = static_cast<float>(i % 7);
      std::memcpy(in.data() + 4 * i, &v, 4);
    }
  const ProcessGroup g = group_of(1);
  GlooCollectiveGroup pg(nullptr, nullptr, g, 0);
  RC_ASSERT(pg.rank() == 0);
  RC_ASSERT(pg.text() == "'shard' [0]");
  if (kind == CollectiveKind::kAllReduce) {
    c.input = ref(2, dt, count);  // a distinct input: the plan copies it into the output first
    const CollectivePlan p = plan_collective(c, g, 0, in.data(), out.data());
    RC_ASSERT(p.copy_bytes == bytes);
    std::memcpy(out.data(), p.copy_from, p.copy_bytes);
    pg.run(p.args, CallingThread{});
  } else if (kind == CollectiveKind::kBroadcast) {
    out = in;  // the root's data, broadcast in place
    pg.run(plan_collective(c, g, 0, out.data(), out.data()).args, CallingThread{});
  } else {
    pg.run(plan_collective(c, g, 0, in.data(), out.data()).args, CallingThread{});
  }
  if (kind == CollectiveKind::kBarrier) return;
  RC_ASSERT(out == in);
}

}  // namespace
}  // namespace fullshard::backends
