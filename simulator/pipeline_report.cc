#include "simulator/pipeline_report.h"

#include <fmt/format.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/pipeline/pipeline_timeline.h"

namespace fullshard::sim {

std::optional<PipelineReport> pipeline_report(const Scenario& s,
                                              const std::vector<RankReport>& classes) {
  if (!s.pipeline.enabled()) return std::nullopt;
  PipelineReport p;
  const PipelineScheduleOptions o = s.pipeline.schedule_options();
  p.schedule = pipeline_schedule_name(o.kind);
  p.pp = o.pp_size;
  p.stages_per_rank = o.stages_per_rank;
  p.microbatches = o.microbatches;
  const PipelineOrder order = build_pipeline_order(o);
  PipelineDurations d;  // a stage of 1 / v of the layers costs 1 / v
  d.forward = d.backward_input = d.backward_weight = 1.0 / o.stages_per_rank;
  p.schedule_bubble = play_pipeline_order(o, order, d).bubble_fraction();
  p.peak_in_flight = peak_in_flight_microbatches(order);
  for (const auto& st : s.pipeline.stages) p.stage_modules.push_back(format_stage_split({st}));
  const int per_pp = s.world_size() / o.pp_size;  // pp is the outermost mesh dim
  p.compute_idle.assign(static_cast<size_t>(o.pp_size), 0.0);
  std::vector<bool> seen(static_cast<size_t>(o.pp_size), false);
  for (const RankReport& c : classes) {
    if (c.ranks.empty() || c.end_time_s <= 0) continue;
    const size_t k = static_cast<size_t>(c.ranks.front() / per_pp);
    if (k >= seen.size() || seen[k]) continue;
    seen[k] = true;
    p.compute_idle[k] = std::max(0.0, 1.0 - c.compute_s / c.end_time_s);  // kernels, not recvs
  }
  return p;
}

nlohmann::json pipeline_report_json(const PipelineReport& p) {
  return {{"schedule", p.schedule},
          {"pp", p.pp},
          {"stages_per_rank", p.stages_per_rank},
          {"microbatches", p.microbatches},
          {"stage_modules", p.stage_modules},
          {"schedule_bubble", p.schedule_bubble},
          {"peak_in_flight_microbatches", p.peak_in_flight},
          {"compute_idle", p.compute_idle}};
}

std::string pipeline_report_text(const PipelineReport& p) {
  std::string in_flight, idle;
  for (size_t i = 0; i < p.peak_in_flight.size(); ++i) {
    in_flight += fmt::format("{}{}", i ? " " : "", p.peak_in_flight[i]);
    idle += fmt::format("{}{:.1f}%", i ? " " : "", 100 * p.compute_idle[i]);
  }
  std::string stages;
  for (size_t i = 0; i < p.stage_modules.size(); ++i)
    stages += fmt::format("{}{}", i ? " " : "", p.stage_modules[i]);
  return fmt::format(
      "  pipeline: {} over pp {}, {} stage{} per rank ({}), {} microbatches; schedule bubble "
      "{:.1f}% (equal stage costs), microbatches in flight at the peak per pp rank: {}\n"
      "    compute stream idle per pp rank over the run (bubble and exposed communication): {}\n",
      p.schedule, p.pp, p.stages_per_rank, p.stages_per_rank == 1 ? "" : "s", stages,
      p.microbatches, 100 * p.schedule_bubble, in_flight, idle);
}

}  // namespace fullshard::sim
