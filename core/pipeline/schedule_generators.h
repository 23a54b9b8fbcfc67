#pragma once
// One function per schedule family: rank `rank`'s compute actions (pipeline_schedule.cc
// dispatches; the options are checked before). Internal to core/pipeline.
#include <vector>

#include "core/pipeline/pipeline_schedule.h"

namespace fullshard::pipeline_detail {

// schedule_single.cc: GPipe and 1F1B, one stage per rank (stage == rank).
std::vector<PipelineAction> gpipe_actions(const PipelineScheduleOptions& o, int rank);
std::vector<PipelineAction> one_f_one_b_actions(const PipelineScheduleOptions& o, int rank);
// schedule_interleaved.cc: looped stages (stage s on rank s % pp).
std::vector<PipelineAction> looped_bfs_actions(const PipelineScheduleOptions& o, int rank);
std::vector<PipelineAction> interleaved_actions(const PipelineScheduleOptions& o, int rank,
                                                bool zero_bubble);
// schedule_v.cc: two stages per rank placed in a V.
std::vector<PipelineAction> zbv_actions(const PipelineScheduleOptions& o, int rank);
std::vector<PipelineAction> dualpipev_actions(const PipelineScheduleOptions& o, int rank);

}  // namespace fullshard::pipeline_detail
