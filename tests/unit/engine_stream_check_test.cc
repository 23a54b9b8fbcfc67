// Stream races and memory safety (NOTE [Happens-before over streams] in stream_checks.cc).
#include <gtest/gtest.h>

#include "tests/unit/engine_test_programs.h"

namespace fullshard::sim {
namespace {

using testing::all_messages;
using testing::has_problem;
using testing::S;

std::vector<Problem> check(const Program& p) { return check_streams(p); }

TEST(EngineStreamChecks, MissingWaitIsARace) {
  ProgramBuilder b(3);
  b.at_step(0).alloc(12, S::kAllGather, "layers.0 all_gather output");
  b.collective(S::kAllGather, "layers.0 all_gather", CollectiveKind::kAllGather, 0, 4096, {}, {12});
  b.kernel(S::kDefault, "layers.0.attention.wq", {12}, {13});  // no wait on the AG event
  const auto problems = check(b.build());
  ASSERT_EQ(problems.size(), 1u) << all_messages(problems);
  const Problem& p = problems[0];
  EXPECT_EQ(p.kind, ProblemKind::kStreamRace);
  EXPECT_EQ(p.message,
            "step 0: rank 3: race on buffer 'layers.0 all_gather output' (id 12): compute op "
            "'layers.0.attention.wq' reads it while all_gather op 'layers.0 all_gather' may still "
            "write it; no event orders them (missing wait_event?)");
  EXPECT_EQ(p.ranks, std::vector<int>{3});
  EXPECT_EQ(p.op, "layers.0.attention.wq");
}

TEST(EngineStreamChecks, WaitOnARecordedEventOrdersTheAccesses) {
  ProgramBuilder b;
  b.alloc(12, S::kAllGather, "ag out");
  b.collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 0, 4096, {}, {12});
  b.record(S::kAllGather, 1).wait(S::kDefault, 1);
  b.kernel(S::kDefault, "mm", {12}, {13});
  EXPECT_TRUE(check(b.build()).empty());
}

TEST(EngineStreamChecks, WaitBeforeTheWriteDoesNotOrderIt) {
  ProgramBuilder b;
  b.alloc(12, S::kAllGather, "ag out");
  b.record(S::kAllGather, 1);  // recorded before the all-gather: too early
  b.collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 0, 4096, {}, {12});
  b.wait(S::kDefault, 1).kernel(S::kDefault, "mm", {12}, {13});
  EXPECT_TRUE(has_problem(check(b.build()), ProblemKind::kStreamRace));
}

TEST(EngineStreamChecks, WriteWhileAnotherStreamMayStillRead) {
  ProgramBuilder b;
  b.alloc(5, S::kDefault, "grad");
  b.kernel(S::kDefault, "backward", {}, {5});
  b.record(S::kDefault, 1).wait(S::kReduceScatter, 1);
  b.collective(S::kReduceScatter, "rs", CollectiveKind::kReduceScatter, 0, 64, {5}, {6});
  b.kernel(S::kDefault, "zero grad", {}, {5});  // overwrites what the RS may still read
  const auto problems = check(b.build());
  ASSERT_EQ(problems.size(), 1u) << all_messages(problems);
  EXPECT_CONTAINS(problems[0].message,
                  "compute op 'zero grad' writes it while reduce_scatter op "
                  "'rs' may still read it");
}

TEST(EngineStreamChecks, HostSynchronizeOrdersLaterLaunches) {
  ProgramBuilder b;
  b.kernel(S::kDefault, "produce", {}, {7}).record(S::kDefault, 1).sync(1);
  b.kernel(S::kDeviceToHost, "offload", {7}, {8});
  EXPECT_TRUE(check(b.build()).empty());
  ProgramBuilder d;  // a device synchronize orders every stream
  d.kernel(S::kReduceScatter, "produce", {}, {7}).sync(0).kernel(S::kDefault, "use", {7}, {});
  EXPECT_TRUE(check(d.build()).empty());
}

TEST(EngineStreamChecks, FreeWhileAnotherStreamMayStillUseIt) {
  ProgramBuilder b;
  b.at_step(1).alloc(20, S::kAllGatherCopyIn, "X");
  b.kernel(S::kAllGatherCopyIn, "copy_in", {}, {20});
  b.record(S::kAllGatherCopyIn, 1).wait(S::kAllGather, 1);
  b.collective(S::kAllGather, "Y", CollectiveKind::kAllGather, 0, 64, {20}, {21});
  b.free(20);  // the copy-in stream never waited for the all-gather
  const auto problems = check(b.build());
  ASSERT_EQ(problems.size(), 1u) << all_messages(problems);
  EXPECT_EQ(problems[0].kind, ProblemKind::kFreeWhileInUse);
  EXPECT_EQ(problems[0].message,
            "step 1: rank 0: use after free: buffer 'X' (id 20, allocated on all_gather_copy_in "
            "stream) freed by the host while all_gather op 'Y' on stream all_gather may still use "
            "it; make the all_gather_copy_in stream wait on an event recorded after 'Y' before "
            "freeing");
}

TEST(EngineStreamChecks, FreeAfterThePoolStreamWaitedIsFine) {
  for (int variant = 0; variant < 2; ++variant) {
    ProgramBuilder b;
    b.alloc(20, S::kAllGatherCopyIn, "X");
    b.kernel(S::kAllGatherCopyIn, "copy_in", {}, {20});
    b.record(S::kAllGatherCopyIn, 1).wait(S::kAllGather, 1);
    b.collective(S::kAllGather, "Y", CollectiveKind::kAllGather, 0, 64, {20}, {21});
    b.record(S::kAllGather, 2);
    if (variant == 0) b.wait(S::kAllGatherCopyIn, 2);  // FSDP2's way
    if (variant == 1) b.sync(2);                       // or the host saw it complete
    b.free(20);
    EXPECT_TRUE(check(b.build()).empty()) << variant;
  }
}

// FSDP2 frees the reduce-scatter output after the optimizer used it on the compute stream
// and only makes the reduce-scatter stream wait for the compute stream in the next backward.
Program deferred_rs_free(bool next_step_waits) {
  ProgramBuilder b;
  b.alloc(1, S::kReduceScatter, "layers.0 reduce_scatter_output");
  b.collective(S::kReduceScatter, "layers.0 reduce_scatter", CollectiveKind::kReduceScatter, 0, 64,
               {}, {1});
  b.record(S::kReduceScatter, 1).wait(S::kDefault, 1);
  b.kernel(S::kDefault, "clip_grad_norm", {1}, {1});
  b.free(1);  // no wait of the reduce-scatter stream on the compute stream yet
  b.at_step(1).kernel(S::kDefault, "backward", {}, {3});
  b.record(S::kDefault, 2);
  if (next_step_waits) b.wait(S::kReduceScatter, 2);
  b.alloc(2, S::kReduceScatter, "layers.0 reduce_scatter_output (step 1)");
  b.collective(S::kReduceScatter, "layers.0 reduce_scatter", CollectiveKind::kReduceScatter, 0, 64,
               {}, {2});
  return b.build();
}

TEST(EngineStreamChecks, FreeRuleAtFreeIsStrictAtReuseFollowsFsdp2) {
  CheckOptions at_free, at_reuse;
  at_reuse.free_rule = FreeRule::kAtReuse;
  const auto strict = check_streams(deferred_rs_free(true), at_free);
  ASSERT_EQ(strict.size(), 1u) << all_messages(strict);
  EXPECT_EQ(strict[0].kind, ProblemKind::kFreeWhileInUse);
  EXPECT_CONTAINS(strict[0].message, "freed by the host while compute op 'clip_grad_norm'");
  EXPECT_TRUE(check_streams(deferred_rs_free(true), at_reuse).empty());

  const auto late = check_streams(deferred_rs_free(false), at_reuse);
  ASSERT_EQ(late.size(), 1u) << all_messages(late);
  EXPECT_EQ(late[0].kind, ProblemKind::kFreeWhileInUse);
  EXPECT_EQ(late[0].step, 1);
  EXPECT_EQ(late[0].message,
            "step 1: rank 0: use after free: buffer 'layers.0 reduce_scatter_output (step 1)' "
            "(id 2, allocated on reduce_scatter stream) is first used by reduce_scatter op "
            "'layers.0 reduce_scatter' while compute op 'clip_grad_norm' may still use buffer "
            "'layers.0 reduce_scatter_output' (id 1), which the host freed to the reduce_scatter "
            "pool before this allocation; make the reduce_scatter stream wait on an event "
            "recorded after 'clip_grad_norm' before this use (or the reduce_scatter stream before "
            "that free)");
}

TEST(EngineStreamChecks, ReuseThroughAStaleEventIsCaughtUnderBothRules) {
  // The pool stream waited for the other user before the free (the strict rule holds), but
  // the new buffer's user waits on an event recorded on the pool stream before that wait.
  for (FreeRule rule : {FreeRule::kAtFree, FreeRule::kAtReuse}) {
    ProgramBuilder b;
    b.alloc(1, S::kAllGatherCopyIn, "old");
    b.kernel(S::kAllGatherCopyIn, "copy_in", {}, {1});
    b.record(S::kAllGatherCopyIn, 1).wait(S::kAllGather, 1);
    b.collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 0, 64, {1}, {9});
    b.record(S::kAllGather, 2).wait(S::kAllGatherCopyIn, 2);
    b.free(1);
    b.alloc(3, S::kAllGatherCopyIn, "new");
    b.wait(S::kReduceScatter, 1);  // stale: before the copy-in stream waited for the AG
    b.kernel(S::kReduceScatter, "user", {}, {3});
    CheckOptions o;
    o.free_rule = rule;
    const auto problems = check_streams(b.build(), o);
    ASSERT_EQ(problems.size(), 1u) << all_messages(problems);
    EXPECT_EQ(problems[0].kind, ProblemKind::kFreeWhileInUse);
    EXPECT_CONTAINS(problems[0].message, "while all_gather op 'ag' may still use buffer 'old'");
  }
}

TEST(EngineStreamChecks, FirstUseOnAnotherStreamWithoutWaitingForThePool) {
  ProgramBuilder b;
  b.alloc(1, S::kDefault, "old activation");
  b.kernel(S::kDefault, "layers.0.mlp", {}, {1});
  b.free(1);  // its block may be handed out again while layers.0.mlp still runs
  b.alloc(2, S::kDefault, "new buffer");
  b.kernel(S::kAllGather, "fill on all_gather stream", {}, {2});
  const auto problems = check(b.build());
  ASSERT_EQ(problems.size(), 1u) << all_messages(problems);
  EXPECT_EQ(problems[0].kind, ProblemKind::kUnorderedFirstUse);
  EXPECT_CONTAINS(problems[0].message,
                  "use after free: buffer 'new buffer' (id 2, allocated on compute stream) is "
                  "first used by all_gather op 'fill on all_gather stream' on stream all_gather");
  EXPECT_CONTAINS(problems[0].message, "compute op 'layers.0.mlp' still uses");

  ProgramBuilder ok;  // the all-gather stream waits for the pool stream after the allocation
  ok.kernel(S::kDefault, "layers.0.mlp", {}, {1});
  ok.alloc(2, S::kDefault, "new buffer").record(S::kDefault, 1).wait(S::kAllGather, 1);
  ok.kernel(S::kAllGather, "fill", {}, {2});
  EXPECT_TRUE(check(ok.build()).empty());
}

TEST(EngineStreamChecks, AccessAfterFreeAndDoubleFree) {
  ProgramBuilder b;
  b.alloc(4, S::kDefault, "params").kernel(S::kDefault, "a", {}, {4});
  b.free(4).at_step(2).kernel(S::kDefault, "late reader", {4}, {});
  b.kernel(S::kDefault, "later reader", {4}, {});  // reported once per buffer
  b.free(4);
  const auto problems = check(b.build());
  ASSERT_EQ(problems.size(), 2u) << all_messages(problems);
  EXPECT_EQ(problems[0].kind, ProblemKind::kUseAfterFree);
  EXPECT_EQ(problems[0].message,
            "step 2: rank 0: use after free: compute op 'late reader' reads buffer 'params' (id "
            "4) after the host freed it (free at instruction #2, step 0)");
  EXPECT_CONTAINS(problems[1].message, "buffer 'params' (id 4) freed twice");
}

TEST(EngineStreamChecks, HostMemoryIsExemptFromPoolRulesButNotFromFree) {
  ProgramBuilder b;
  b.kernel(S::kDefault, "busy", {}, {9});
  b.alloc(3, S::kDefault, "pinned", /*on_host=*/true);
  b.kernel(S::kDeviceToHost, "d2h", {}, {3});  // no wait on the compute stream: fine
  b.free(3);                                   // no pool stream wait: fine
  EXPECT_TRUE(check(b.program()).empty()) << all_messages(check(b.program()));
  b.kernel(S::kHostToDevice, "h2d", {3}, {});
  EXPECT_TRUE(has_problem(check(b.build()), ProblemKind::kUseAfterFree));
}

TEST(EngineStreamChecks, ReallocatingAnIdStartsAFreshBuffer) {
  ProgramBuilder b;
  b.alloc(4, S::kDefault, "a").kernel(S::kDefault, "w", {}, {4}).free(4);
  b.alloc(4, S::kDefault, "b").kernel(S::kDefault, "r", {4}, {});
  EXPECT_TRUE(check(b.build()).empty());
}

TEST(EngineStreamChecks, OptionsTurnChecksOff) {
  ProgramBuilder b;
  b.kernel(S::kAllGather, "w", {}, {1}).kernel(S::kDefault, "r", {1}, {});
  b.alloc(2, S::kDefault, "x").free(2).kernel(S::kDefault, "late", {2}, {});
  const Program p = b.build();
  EXPECT_EQ(check(p).size(), 2u);
  CheckOptions no_races;
  no_races.races = false;
  EXPECT_EQ(check_streams(p, no_races).size(), 1u);
  CheckOptions no_memory;
  no_memory.memory = false;
  EXPECT_EQ(check_streams(p, no_memory).size(), 1u);
  CheckOptions capped;
  capped.max_problems = 0;
  EXPECT_TRUE(check_streams(p, capped).empty());
}

TEST(EngineStreamChecks, FsdpPatternHasNoFalsePositives) {
  for (bool prefetch : {false, true}) {
    for (bool sync : {false, true}) {
      testing::FsdpShape shape;
      shape.layers = 3;
      shape.steps = 2;
      shape.prefetch = prefetch;
      shape.sync_each_step = sync;
      std::vector<Program> ps;
      for (int r = 0; r < 2; ++r) ps.push_back(testing::fsdp_program(r, shape));
      const auto problems = check_programs(ps, testing::one_group(2));
      EXPECT_TRUE(problems.empty()) << prefetch << sync << "\n" << all_messages(problems);
      const EngineResult r = simulate(ps, testing::one_group(2), testing::UnitCost());
      EXPECT_TRUE(r.ok());
      EXPECT_GT(r.ranks[0].exposed_comm_s, 0);
    }
  }
}

TEST(EngineStreamChecks, EveryWaitOfTheFsdpPatternIsNeeded) {
  testing::FsdpShape shape;
  shape.layers = 3;
  shape.steps = 2;
  std::vector<testing::NeededWait> needed;
  const Program full = testing::fsdp_program(0, shape, &needed);
  ASSERT_GT(needed.size(), 20u);
  for (const testing::NeededWait& w : needed) {
    Program broken = full;
    ASSERT_EQ(broken.instrs[w.instr].type, InstrType::kWaitEvent);
    broken.instrs.erase(broken.instrs.begin() + static_cast<std::ptrdiff_t>(w.instr));
    const auto problems = check(broken);
    EXPECT_TRUE(has_problem(problems, w.kind))
        << "removing wait #" << w.instr << " should give " << problem_kind_name(w.kind) << "\n"
        << all_messages(problems);
  }
}

}  // namespace
}  // namespace fullshard::sim
