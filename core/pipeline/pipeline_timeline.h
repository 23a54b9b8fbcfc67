#pragma once
// What a pipeline order costs: each rank runs its actions in order, an action starting when
// its rank is free and its inputs exist (a forward after the previous stage's forward of the
// same microbatch, a backward after its own forward and the next stage's input gradient, a W
// after its I), so the step's length, each rank's idle time (the bubble) and how many
// microbatches' activations each rank holds at once follow from the order alone.
#include <string>
#include <vector>

#include "core/pipeline/pipeline_schedule.h"

namespace fullshard {

// Seconds per action of one stage and microbatch; a full backward costs I + W.
struct PipelineDurations {
  double forward = 1.0;
  double backward_input = 1.0;
  double backward_weight = 1.0;
  double p2p = 0.0;  // an activation or gradient crossing to another rank
};

struct PipelineTimeline {
  // Per rank, per action (the order's indices): start and end seconds.
  std::vector<std::vector<double>> start, end;
  std::vector<double> busy;  // per rank, seconds computing
  double makespan = 0.0;     // the last action's end
  // Idle share of all ranks over the makespan: 1 - sum(busy) / (pp * makespan).
  double bubble_fraction() const;
};

// "" when `order` runs every stage's forward and backward (B, or I then W) of every microbatch
// exactly once, each on the rank that holds the stage, a backward after its forward and a W after
// its I on that rank; otherwise the first problem, in one line.
std::string check_pipeline_order(const PipelineScheduleOptions& o, const PipelineOrder& order);

// Plays a checked order. Throws InputError (where: "pipeline order") naming the blocked actions
// when no rank can start its next one (an order that deadlocks).
PipelineTimeline play_pipeline_order(const PipelineScheduleOptions& o, const PipelineOrder& order,
                                     const PipelineDurations& d);

// Per rank, the most microbatches whose forward has run and whose backward has not finished
// (B, or W when split: the weight gradient still reads the saved activations), summed over the
// rank's stages: the count of saved-activation sets the rank holds at its peak.
std::vector<int> peak_in_flight_microbatches(const PipelineOrder& order);

}  // namespace fullshard
