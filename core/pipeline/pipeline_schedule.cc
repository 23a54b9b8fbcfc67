#include "core/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <array>
#include <cctype>

#include <fmt/format.h>

#include "core/common/error.h"
#include "core/pipeline/schedule_generators.h"

namespace fullshard {
namespace {

constexpr std::array kKinds = {
    PipelineScheduleKind::kGPipe,
    PipelineScheduleKind::k1F1B,
    PipelineScheduleKind::kInterleaved1F1B,
    PipelineScheduleKind::kLoopedBFS,
    PipelineScheduleKind::kInterleavedZeroBubble,
    PipelineScheduleKind::kZBVZeroBubble,
    PipelineScheduleKind::kDualPipeV,
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const char* pipeline_schedule_name(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::kGPipe: return "GPipe";
    case PipelineScheduleKind::k1F1B: return "1F1B";
    case PipelineScheduleKind::kInterleaved1F1B: return "Interleaved1F1B";
    case PipelineScheduleKind::kLoopedBFS: return "LoopedBFS";
    case PipelineScheduleKind::kInterleavedZeroBubble: return "InterleavedZeroBubble";
    case PipelineScheduleKind::kZBVZeroBubble: return "ZBVZeroBubble";
    case PipelineScheduleKind::kDualPipeV: return "DualPipeV";
  }
  return "?";
}

PipelineScheduleKind parse_pipeline_schedule(std::string_view name, const std::string& where) {
  std::string names;
  for (PipelineScheduleKind k : kKinds) {
    if (lower(name) == lower(pipeline_schedule_name(k))) return k;
    names += fmt::format("{}{}", names.empty() ? "" : ", ", pipeline_schedule_name(k));
  }
  throw InputError(where, fmt::format("unknown pipeline schedule \"{}\"", name),
                   "use one of " + names + " (case does not matter)");
}

bool is_single_stage_schedule(PipelineScheduleKind kind) {
  return kind == PipelineScheduleKind::kGPipe || kind == PipelineScheduleKind::k1F1B;
}

bool is_v_schedule(PipelineScheduleKind kind) {
  return kind == PipelineScheduleKind::kZBVZeroBubble || kind == PipelineScheduleKind::kDualPipeV;
}

void check_pipeline_schedule(const PipelineScheduleOptions& o,
                             const PipelineScheduleFields& fields) {
  const char* name = pipeline_schedule_name(o.kind);
  auto positive = [&](int v, const std::string& field) {
    if (v < 1)
      throw InputError(field, fmt::format("{} is not positive", v), "give a count of at least 1");
  };
  positive(o.pp_size, fields.pp);
  positive(o.stages_per_rank, fields.stages_per_rank);
  positive(o.microbatches, fields.microbatches);
  if (is_single_stage_schedule(o.kind) && o.stages_per_rank != 1)
    throw InputError(
        fields.stages_per_rank,
        fmt::format("{} stages per rank with {}, which runs one", o.stages_per_rank, name),
        "set 1, or pick a multi-stage schedule (Interleaved1F1B, LoopedBFS, ...)");
  if (is_v_schedule(o.kind) && o.stages_per_rank != 2)
    throw InputError(
        fields.stages_per_rank,
        fmt::format("{} stages per rank with {}, which needs exactly 2", o.stages_per_rank, name),
        "set 2");
  if (o.kind == PipelineScheduleKind::k1F1B && o.microbatches < o.pp_size)
    throw InputError(
        fields.microbatches,
        fmt::format("{} microbatches for 1F1B over {} stages", o.microbatches, o.pp_size),
        fmt::format("give at least {} (one per stage)", o.pp_size));
  if (o.kind == PipelineScheduleKind::kDualPipeV && o.microbatches < o.num_stages())
    throw InputError(
        fields.microbatches,
        fmt::format("{} microbatches for DualPipeV over {} stages", o.microbatches, o.num_stages()),
        fmt::format("give at least {} (one per stage)", o.num_stages()));
  if (o.kind == PipelineScheduleKind::kInterleaved1F1B ||
      o.kind == PipelineScheduleKind::kInterleavedZeroBubble) {
    // PyTorch's flexible rounds: max(1, m // pp) rounds of equal size.
    const int rounds = std::max(1, o.microbatches / o.pp_size);
    if (o.microbatches % rounds != 0)
      throw InputError(
          fields.microbatches,
          fmt::format("{} microbatches for {} over pp {}: not a multiple of its {} rounds",
                      o.microbatches, name, o.pp_size, rounds),
          fmt::format("give a multiple of pp ({}), or fewer microbatches than pp", o.pp_size));
  }
}

int pipeline_stage_rank(const PipelineScheduleOptions& o, int stage) {
  FULLSHARD_CHECK(stage >= 0 && stage < o.num_stages(), "stage out of range");
  if (is_v_schedule(o.kind)) return stage < o.pp_size ? stage : o.num_stages() - 1 - stage;
  return stage % o.pp_size;
}

std::vector<int> pipeline_rank_stages(const PipelineScheduleOptions& o, int rank) {
  FULLSHARD_CHECK(rank >= 0 && rank < o.pp_size, "rank out of range");
  if (is_v_schedule(o.kind)) return {rank, o.num_stages() - 1 - rank};
  std::vector<int> stages;
  for (int s = rank; s < o.num_stages(); s += o.pp_size) stages.push_back(s);
  return stages;
}

PipelineOrder build_pipeline_order(const PipelineScheduleOptions& o,
                                   const PipelineScheduleFields& fields) {
  check_pipeline_schedule(o, fields);
  using namespace pipeline_detail;
  PipelineOrder order(o.pp_size);
  for (int r = 0; r < o.pp_size; ++r) {
    switch (o.kind) {
      case PipelineScheduleKind::kGPipe: order[r] = gpipe_actions(o, r); break;
      case PipelineScheduleKind::k1F1B: order[r] = one_f_one_b_actions(o, r); break;
      case PipelineScheduleKind::kInterleaved1F1B:
        order[r] = interleaved_actions(o, r, false);
        break;
      case PipelineScheduleKind::kLoopedBFS: order[r] = looped_bfs_actions(o, r); break;
      case PipelineScheduleKind::kInterleavedZeroBubble:
        order[r] = interleaved_actions(o, r, true);
        break;
      case PipelineScheduleKind::kZBVZeroBubble: order[r] = zbv_actions(o, r); break;
      case PipelineScheduleKind::kDualPipeV: order[r] = dualpipev_actions(o, r); break;
    }
  }
  return order;
}

}  // namespace fullshard
