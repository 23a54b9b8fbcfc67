#include "tools/fullshard/pipeline_commands.h"

#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/pipeline/pipeline_schedule.h"
#include "core/pipeline/pipeline_timeline.h"

namespace fullshard::cli {

CLI::App* add_pipeline_command(CLI::App& app, PipelineFlags& f) {
  auto* c = app.add_subcommand(
      "pipeline",
      "a pipeline schedule as PyTorch runs it: each pp rank's actions, the bubble and the "
      "microbatches in flight");
  c->add_option("--schedule", f.schedule,
                "GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble "
                "or DualPipeV (case does not matter)")
      ->capture_default_str();
  c->add_option("--pp", f.pp, "ranks in the pipeline")->required();
  c->add_option("--microbatches", f.microbatches, "microbatches per step")->required();
  c->add_option("--stages-per-rank", f.stages_per_rank,
                "virtual stages per rank (default 1; 2 for ZBVZeroBubble and DualPipeV)");
  c->add_option("--forward", f.forward, "seconds of one stage's forward of one microbatch")
      ->capture_default_str();
  c->add_option("--backward-input", f.backward_input, "seconds of its input gradient (I)")
      ->capture_default_str();
  c->add_option("--backward-weight", f.backward_weight, "seconds of its weight gradient (W)")
      ->capture_default_str();
  c->add_option("--p2p", f.p2p, "seconds for an activation or gradient to reach another rank")
      ->capture_default_str();
  c->add_flag("--actions", f.actions, "print each rank's actions as PyTorch prints them");
  c->add_flag("--json", f.json, "JSON output");
  return c;
}

int cmd_pipeline(const PipelineFlags& f) {
  PipelineScheduleOptions o;
  o.kind = parse_pipeline_schedule(f.schedule, "--schedule");
  o.pp_size = f.pp;
  o.microbatches = f.microbatches;
  o.stages_per_rank = f.stages_per_rank > 0 ? f.stages_per_rank : is_v_schedule(o.kind) ? 2 : 1;
  if (f.stages_per_rank < 0)
    throw InputError("--stages-per-rank", fmt::format("is {}", f.stages_per_rank),
                     "give 1 or more, or leave it out for the schedule's");
  PipelineDurations d{f.forward, f.backward_input, f.backward_weight, f.p2p};
  for (auto [v, flag] : {std::pair{d.forward, "--forward"},
                         {d.backward_input, "--backward-input"},
                         {d.backward_weight, "--backward-weight"},
                         {d.p2p, "--p2p"}})
    if (!(std::isfinite(v) && v >= 0))
      throw InputError(flag, fmt::format("is {}", v), "give seconds, 0 or more");
  const PipelineOrder order =
      build_pipeline_order(o, {"--pp", "--stages-per-rank", "--microbatches"});
  const PipelineTimeline t = play_pipeline_order(o, order, d);
  const std::vector<int> peak = peak_in_flight_microbatches(order);
  if (f.json) {
    nlohmann::json j = {{"schedule", pipeline_schedule_name(o.kind)},
                        {"pp", o.pp_size},
                        {"stages_per_rank", o.stages_per_rank},
                        {"microbatches", o.microbatches},
                        {"makespan", t.makespan},
                        {"bubble_fraction", t.bubble_fraction()},
                        {"ranks", nlohmann::json::array()}};
    for (int r = 0; r < o.pp_size; ++r)
      j["ranks"].push_back({{"stages", pipeline_rank_stages(o, r)},
                            {"peak_in_flight_microbatches", peak[r]},
                            {"busy", t.busy[r]},
                            {"idle", t.makespan - t.busy[r]},
                            {"actions", format_pipeline_actions(order[r])}});
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("{} over pp {}: {} stage{} per rank ({} stages), {} microbatches\n",
                           pipeline_schedule_name(o.kind), o.pp_size, o.stages_per_rank,
                           o.stages_per_rank == 1 ? "" : "s", o.num_stages(), o.microbatches);
  std::cout << fmt::format("{:>5}  {:<12} {:>9} {:>10} {:>10}\n", "rank", "stages", "in flight",
                           "busy", "idle");
  for (int r = 0; r < o.pp_size; ++r)
    std::cout << fmt::format("{:>5}  {:<12} {:>9} {:>10.4g} {:>10.4g}\n", r,
                             fmt::format("{}", fmt::join(pipeline_rank_stages(o, r), " ")), peak[r],
                             t.busy[r], t.makespan - t.busy[r]);
  std::cout << fmt::format("step {:.4g}, bubble {:.1f}% (idle share of all ranks)\n", t.makespan,
                           100.0 * t.bubble_fraction());
  if (f.actions)
    for (int r = 0; r < o.pp_size; ++r)
      std::cout << fmt::format("rank {}: {}\n", r, format_pipeline_actions(order[r]));
  return 0;
}

}  // namespace fullshard::cli
