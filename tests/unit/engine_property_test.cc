// Properties of the checks and the timing engine over random programs.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <map>

#include "tests/unit/engine_test_programs.h"

namespace fullshard::sim {
namespace {

using testing::all_messages;
using testing::S;

testing::FsdpShape random_shape() {
  testing::FsdpShape shape;
  shape.layers = *rc::gen::inRange(1, 6);
  shape.steps = *rc::gen::inRange(1, 4);
  shape.prefetch = *rc::gen::arbitrary<bool>();
  shape.sync_each_step = *rc::gen::arbitrary<bool>();
  shape.ag_bytes = static_cast<uint64_t>(*rc::gen::inRange(1, 10000));
  shape.compute_s = *rc::gen::inRange(1, 100) / 10.0;
  return shape;
}

RC_GTEST_PROP(EngineProperty, FsdpProgramsAreCleanAndComplete, ()) {
  const testing::FsdpShape shape = random_shape();
  const int world = *rc::gen::inRange(1, 5);
  std::vector<Program> ps;
  for (int r = 0; r < world; ++r) ps.push_back(testing::fsdp_program(r, shape));
  const EngineResult result = simulate(ps, testing::one_group(world), PlaceholderCostModel());
  RC_ASSERT(result.problems.empty());
  RC_ASSERT(result.completed);
  RC_ASSERT(result.ranks[0].exposed_comm_s <= result.makespan_s);
}

RC_GTEST_PROP(EngineProperty, RemovingANeededWaitIsReported, ()) {
  const testing::FsdpShape shape = random_shape();
  std::vector<testing::NeededWait> needed;
  Program p = testing::fsdp_program(0, shape, &needed);
  const auto& w = *rc::gen::elementOf(needed);
  p.instrs.erase(p.instrs.begin() + static_cast<std::ptrdiff_t>(w.instr));
  const auto problems = check_streams(p);
  RC_ASSERT(testing::has_problem(problems, w.kind));
}

// A random program whose every conflicting access, free and cross-stream first use is
// ordered by a record/wait pair inserted just before it (often redundantly).
Program random_correct_program() {
  ProgramBuilder b;
  struct Buf {
    StreamRole pool;
    bool on_host;
    uint64_t alloc_event;
    uint16_t accessed = 0;  // streams that accessed it since the allocation (a bit each)
    uint16_t readers = 0;   // streams that read it since the last write
    int writer = -1;
  };
  std::map<uint64_t, Buf> live;
  uint64_t next_buffer = 1, next_event = 1;
  const auto stream = [] { return static_cast<StreamRole>(*rc::gen::inRange(0, kNumStreams)); };
  const auto order = [&](int from, StreamRole to) {  // `to` waits for `from`'s work so far
    if (from == static_cast<int>(to)) return;
    const uint64_t e = next_event++;
    b.record(static_cast<StreamRole>(from), e).wait(to, e);
  };
  const int n = *rc::gen::inRange(1, 80);
  for (int k = 0; k < n; ++k) {
    const int action = *rc::gen::inRange(0, 10);
    if (action <= 1 || live.empty()) {  // allocate
      const uint64_t id = next_buffer++;
      const StreamRole pool = stream();
      const bool on_host = *rc::gen::inRange(0, 5) == 0;
      b.alloc(id, pool, "buf" + std::to_string(id), on_host);
      const uint64_t e = next_event++;
      b.record(pool, e);
      live.emplace(id, Buf{pool, on_host, e});
    } else if (action == 2) {  // free, after the pool stream waited for every other user
      auto it = std::next(live.begin(), *rc::gen::inRange<size_t>(0, live.size()));
      for (int s = 0; s < kNumStreams; ++s) {
        if (it->second.accessed & (1u << s)) order(s, it->second.pool);
      }
      b.free(it->first);
      live.erase(it);
    } else if (action == 3) {  // host synchronizes on some event
      b.sync(*rc::gen::inRange<uint64_t>(0, next_event));
    } else {  // an op on a random stream touching up to three live buffers
      const StreamRole s = stream();
      const int si = static_cast<int>(s);
      const int count = *rc::gen::inRange(1, 4);
      std::vector<uint64_t> reads, writes;
      for (int j = 0; j < count; ++j) {
        auto it = std::next(live.begin(), *rc::gen::inRange<size_t>(0, live.size()));
        Buf& buf = it->second;
        const bool write = *rc::gen::arbitrary<bool>();
        if (!buf.on_host && buf.pool != s && !(buf.accessed & (1u << si)))
          b.wait(s, buf.alloc_event);
        if (buf.writer >= 0) order(buf.writer, s);
        if (write) {
          for (int r = 0; r < kNumStreams; ++r) {
            if (buf.readers & (1u << r)) order(r, s);
          }
          buf.writer = si;
          buf.readers = 0;
          writes.push_back(it->first);
        } else {
          buf.readers |= static_cast<uint16_t>(1u << si);
          reads.push_back(it->first);
        }
        buf.accessed |= static_cast<uint16_t>(1u << si);
      }
      b.kernel(s, "op" + std::to_string(k), reads, writes, *rc::gen::inRange(0, 5));
    }
  }
  return b.build();
}

RC_GTEST_PROP(EngineProperty, RandomCorrectProgramsHaveNoProblems, ()) {
  const Program p = random_correct_program();
  const auto problems = check_streams(p);
  RC_ASSERT(problems.empty());
  const EngineResult r = simulate({p}, {}, testing::UnitCost(0.1));
  RC_ASSERT(r.ok());
}

RC_GTEST_PROP(EngineProperty, DeterministicAndSymmetricEqualsFull, ()) {
  const testing::FsdpShape shape = random_shape();
  const int world = *rc::gen::inRange(2, 5);
  std::vector<Program> ps;
  for (int r = 0; r < world; ++r) ps.push_back(testing::fsdp_program(r, shape));
  const testing::UnitCost cost(0.01);
  const EngineResult a = simulate(ps, testing::one_group(world), cost);
  const EngineResult b = simulate(ps, testing::one_group(world), cost);
  EngineOptions sym;
  sym.symmetric = true;
  const EngineResult one = simulate({ps[0]}, testing::one_group(world), cost, sym);
  RC_ASSERT(a.events_processed == b.events_processed);
  for (int r = 0; r < world; ++r) RC_ASSERT(a.ranks[r].times == b.ranks[r].times);
  RC_ASSERT(one.ranks[0].times == a.ranks[0].times);
  RC_ASSERT(one.makespan_s == a.makespan_s);
}

// uncovered_seconds against a brute-force count over unit cells of integer intervals.
RC_GTEST_PROP(EngineProperty, UncoveredSecondsMatchesBruteForce, ()) {
  const auto intervals = [] {
    std::vector<std::pair<double, double>> v;
    const int n = *rc::gen::inRange(0, 8);
    for (int i = 0; i < n; ++i) {
      const int a = *rc::gen::inRange(0, 40), len = *rc::gen::inRange(0, 10);
      v.emplace_back(a, a + len);
    }
    return v;
  };
  const auto busy = intervals(), covered = intervals();
  std::array<bool, 64> b{}, c{};
  for (const auto& [s, e] : busy)
    for (int x = static_cast<int>(s); x < e; ++x) b[x] = true;
  for (const auto& [s, e] : covered)
    for (int x = static_cast<int>(s); x < e; ++x) c[x] = true;
  double expected = 0;
  for (size_t x = 0; x < b.size(); ++x) expected += b[x] && !c[x];
  RC_ASSERT(uncovered_seconds(busy, covered) == expected);
}

// Not a benchmark: prints the engine's speed on a large FSDP-like program (build Release to
// read the figure) and makes sure nothing is quadratic.
TEST(EngineSpeed, LargeProgram) {
  testing::FsdpShape shape;
  shape.layers = 80;
  shape.steps = 250;
  shape.prefetch = true;
  std::vector<Program> ps;
  ps.push_back(testing::fsdp_program(0, shape));
  const auto groups = testing::one_group(64);
  EngineOptions sym;
  sym.symmetric = true;
  sym.checks = false;
  CheckOptions check;
  check.symmetric = true;
  const auto t0 = std::chrono::steady_clock::now();
  const EngineResult r = simulate(ps, groups, PlaceholderCostModel(), sym);
  const auto t1 = std::chrono::steady_clock::now();
  const auto problems = check_programs(ps, groups, check);
  const auto t2 = std::chrono::steady_clock::now();
  const Program& p = ps[0];
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(problems.empty());
  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::printf("%zu instructions: timing %.1f ms, checks %.1f ms, %llu events\n", p.instrs.size(),
              ms(t1 - t0), ms(t2 - t1), static_cast<unsigned long long>(r.events_processed));
}

}  // namespace
}  // namespace fullshard::sim
