// Every schedule over random shapes: each stage's forward and backward of every microbatch run
// once on the stage's rank, the order plays without deadlock under any stage costs, and the
// timeline keeps its own invariants.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>

#include "core/common/error.h"
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

}  // namespace
}  // namespace fullshard
