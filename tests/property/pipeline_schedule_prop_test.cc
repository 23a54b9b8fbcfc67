// Every schedule over random shapes: each stage's forward and backward of every microbatch run
// once on the stage's rank, the order plays without deadlock under any stage costs, and the
// timeline keeps its own invariants.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>

#include "core/common/error.h"
#include "core/pipeline/pipeline_lowering.h"
#include "core/pipeline/pipeline_schedule.h"
#include "core/pipeline/pipeline_timeline.h"

namespace fullshard {
namespace {

const std::vector<PipelineScheduleKind> kKinds = {PipelineScheduleKind::kGPipe,
                                                  PipelineScheduleKind::k1F1B,
                                                  PipelineScheduleKind::kInterleaved1F1B,
                                                  PipelineScheduleKind::kLoopedBFS,
                                                  PipelineScheduleKind::kInterleavedZeroBubble,
                                                  PipelineScheduleKind::kZBVZeroBubble,
                                                  PipelineScheduleKind::kDualPipeV};

RC_GTEST_PROP(PipelineScheduleProp, EveryShapeRunsEachActionOnceAndPlays, ()) {
  PipelineScheduleOptions o;
  o.kind = *rc::gen::elementOf(kKinds);
  o.pp_size = *rc::gen::inRange(1, 9);
  o.stages_per_rank = is_single_stage_schedule(o.kind) ? 1
                      : is_v_schedule(o.kind)          ? 2
                                                       : *rc::gen::inRange(1, 5);
  o.microbatches = *rc::gen::inRange(1, 33);
  try {
    check_pipeline_schedule(o);
  } catch (const InputError& e) {
    RC_ASSERT(e.where() ==
              "pipeline.microbatches");  // the only field a valid kind/placement leaves
    RC_TAG("refused");
    return;
  }
  RC_TAG(pipeline_schedule_name(o.kind));
  const PipelineOrder order = build_pipeline_order(o);
  RC_ASSERT(check_pipeline_order(o, order) == "");
  PipelineDurations d;
  d.forward = *rc::gen::inRange(1, 100) / 10.0;
  d.backward_input = *rc::gen::inRange(1, 100) / 10.0;
  d.backward_weight = *rc::gen::inRange(0, 100) / 10.0;
  d.p2p = *rc::gen::inRange(0, 20) / 10.0;
  const PipelineTimeline t = play_pipeline_order(o, order, d);
  // No rank computes more than the whole step; each rank's actions do not overlap in time.
  const double work =
      o.microbatches * o.stages_per_rank * (d.forward + d.backward_input + d.backward_weight);
  for (int r = 0; r < o.pp_size; ++r) {
    RC_ASSERT(std::abs(t.busy[r] - work) < 1e-9 * work);
    for (size_t i = 1; i < t.start[r].size(); ++i) RC_ASSERT(t.start[r][i] >= t.end[r][i - 1]);
  }
  RC_ASSERT(t.makespan >= work - 1e-9);
  RC_ASSERT(t.bubble_fraction() >= -1e-12);
  RC_ASSERT(t.bubble_fraction() < 1.0);
  // Activations in flight: at least one microbatch, at most all of the rank's.
  for (int peak : peak_in_flight_microbatches(order)) {
    RC_ASSERT(peak >= 1);
    RC_ASSERT(peak <= o.microbatches * o.stages_per_rank);
  }
}

// NOTE [Lowered send and recv order] (core/pipeline/pipeline_lowering.h): every schedule's
// lowered lists keep the compute order, carry one send and one recv per transfer between ranks
// and none within a rank, and run with each send meeting its recv.
RC_GTEST_PROP(PipelineScheduleProp, LoweredOrdersPairEverySendAndNeverDeadlock, ()) {
  PipelineScheduleOptions o;
  o.kind = *rc::gen::elementOf(kKinds);
  o.pp_size = *rc::gen::inRange(1, 9);
  o.stages_per_rank = is_single_stage_schedule(o.kind) ? 1
                      : is_v_schedule(o.kind)          ? 2
                                                       : *rc::gen::inRange(1, 5);
  o.microbatches = *rc::gen::inRange(1, 33);
  try {
    check_pipeline_schedule(o);
  } catch (const InputError&) {
    return;
  }
  RC_TAG(pipeline_schedule_name(o.kind));
  const PipelineOrder order = build_pipeline_order(o);
  const LoweredOrder lowered = lower_pipeline_order(o, order);
  RC_ASSERT(check_lowered_order(o, lowered) == "");
  int transfers = 0;  // stage boundaries between ranks, both ways, every microbatch
  for (int s = 0; s + 1 < o.num_stages(); ++s)
    transfers += pipeline_stage_rank(o, s) != pipeline_stage_rank(o, s + 1) ? 2 : 0;
  int sends = 0, recvs = 0;
  for (int r = 0; r < o.pp_size; ++r) {
    std::vector<PipelineAction> compute;
    for (const LoweredAction& a : lowered[r]) {
      compute.insert(compute.end(), a.compute.begin(), a.compute.end());
      sends += a.kind == LoweredKind::kSendF || a.kind == LoweredKind::kSendB;
      recvs += a.kind == LoweredKind::kRecvF || a.kind == LoweredKind::kRecvB;
    }
    RC_ASSERT(compute.size() == order[r].size());
    for (size_t i = 0; i < compute.size(); ++i) {
      RC_ASSERT(compute[i].stage == order[r][i].stage);
      RC_ASSERT(compute[i].op == order[r][i].op);
      RC_ASSERT(compute[i].microbatch == order[r][i].microbatch);
    }
  }
  RC_ASSERT(sends == transfers * o.microbatches);
  RC_ASSERT(recvs == sends);
}

}  // namespace
}  // namespace fullshard
