#pragma once
// Pipeline schedules as torch.distributed.pipelining builds them (schedules.py in PyTorch 2.11):
// which stages each pp rank holds and the order in which it runs their forward and backward
// actions. Pure functions; tests/unit/pipeline_schedule_test.cc compares every rank's order
// with PyTorch's own over a grid of shapes (tests/data/oracle/pipeline_schedules.json).
//
// NOTE [Pipeline schedules as PyTorch runs them]: the reference is what PyTorch's runtime
// executes. For the multi-stage schedules that is `pipeline_order` (the runtime lowers it,
// adding communication, unshard/reshard and reduce-grad actions but keeping the compute order);
// for GPipe and 1F1B it is `_step_microbatches` (their `_get_pipeline_order` is a picture, and
// 1F1B's gives the last rank F1..Fm where the runtime runs F0..Fm-1). A shape PyTorch's
// constructor refuses is refused here too, with the field named (`check_pipeline_schedule`).
// Stage placement: "loop" (stage s on rank s % pp) for all but ZBVZeroBubble and DualPipeV,
// which place rank r's two stages at r and 2 pp - 1 - r ("v").
#include <string>
#include <string_view>
#include <vector>

#include "core/pipeline/pipeline_action.h"

namespace fullshard {

enum class PipelineScheduleKind {
  kGPipe,
  k1F1B,
  kInterleaved1F1B,
  kLoopedBFS,
  kInterleavedZeroBubble,
  kZBVZeroBubble,
  kDualPipeV,
};

// PyTorch's names ("GPipe", "1F1B", "Interleaved1F1B", ...), as torchtitan's
// `pipeline_parallel_schedule` takes them.
const char* pipeline_schedule_name(PipelineScheduleKind kind);
// Case-insensitive, as torch's get_schedule_class; InputError at `where` listing the names.
PipelineScheduleKind parse_pipeline_schedule(std::string_view name, const std::string& where);
// GPipe and 1F1B: one stage per rank.
bool is_single_stage_schedule(PipelineScheduleKind kind);
// ZBVZeroBubble and DualPipeV: two stages per rank placed in a V.
bool is_v_schedule(PipelineScheduleKind kind);

struct PipelineScheduleOptions {
  PipelineScheduleKind kind = PipelineScheduleKind::k1F1B;
  int pp_size = 1;          // ranks in the pp group
  int stages_per_rank = 1;  // virtual stages per rank (2 for the V schedules)
  int microbatches = 1;     // per step
  int num_stages() const { return pp_size * stages_per_rank; }
};

// Where an error about each field points: JSON paths of a scenario, or the CLI's flags.
struct PipelineScheduleFields {
  std::string pp = "pipeline.pp";
  std::string stages_per_rank = "pipeline.stages_per_rank";
  std::string microbatches = "pipeline.microbatches";
};

// Throws InputError naming the field for a shape PyTorch's schedule constructor refuses (or a
// count that is not positive).
void check_pipeline_schedule(const PipelineScheduleOptions& o,
                             const PipelineScheduleFields& fields = {});

// The rank that holds `stage`, and the stages rank `rank` holds (ascending local order, as
// PyTorch's stage list is built).
int pipeline_stage_rank(const PipelineScheduleOptions& o, int stage);
std::vector<int> pipeline_rank_stages(const PipelineScheduleOptions& o, int rank);

// Every rank's compute actions in the order PyTorch's runtime runs them. Checks first.
PipelineOrder build_pipeline_order(const PipelineScheduleOptions& o,
                                   const PipelineScheduleFields& fields = {});

}  // namespace fullshard
