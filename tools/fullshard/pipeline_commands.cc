#include "tools/fullshard/pipeline_commands.h"

#include <algorithm>
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/pipeline/pipeline_schedule.h"
#include "core/pipeline/pipeline_timeline.h"
#include "core/pipeline/stage_split.h"

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
  c->add_option(
      "--stages-per-rank", f.stages_per_rank,
      "virtual stages per rank (default as torchtitan: 1 for GPipe and 1F1B, 2 for the others)");
  c->add_option("--layers", f.layers,
                "transformer layers: show each stage's modules, split as torchtitan does");
  c->add_option("--layers-per-stage", f.layers_per_stage,
                "with --layers: torchtitan's pipeline_parallel_layers_per_stage (sets the stages)");
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
  o.stages_per_rank = f.stages_per_rank > 0              ? f.stages_per_rank
                      : is_single_stage_schedule(o.kind) ? 1
                                                         : 2;  // torchtitan's default
  if (f.stages_per_rank < 0)
    throw InputError("--stages-per-rank", fmt::format("is {}", f.stages_per_rank),
                     "give 1 or more, or leave it out for the schedule's");
  if (f.layers < 0) throw InputError("--layers", fmt::format("is {}", f.layers), "give 1 or more");
  if (f.layers_per_stage != 0 && f.layers == 0)
    throw InputError("--layers-per-stage", "is given without --layers", "add --layers N");
  const StageSplitFields split_fields{"--pp", "--layers-per-stage", "--layers", "--layers"};
  std::vector<PipelineStageModules> modules;
  if (f.layers > 0) {
    if (f.layers_per_stage != 0) {
      if (f.pp < 1) throw InputError("--pp", fmt::format("is {}", f.pp), "give 1 or more");
      const int stages =
          pipeline_num_stages(o.kind, f.pp, f.layers, f.layers_per_stage, 1, 1, split_fields);
      if (f.stages_per_rank > 0 && f.stages_per_rank != stages / f.pp)
        throw InputError(
            "--stages-per-rank",
            fmt::format("is {}, but --layers-per-stage makes {}", f.stages_per_rank, stages / f.pp),
            "give one of the two");
      o.stages_per_rank = stages / f.pp;
    }
  }
  PipelineDurations d{f.forward, f.backward_input, f.backward_weight, f.p2p};
  for (auto [v, flag] : {std::pair{d.forward, "--forward"},
                         {d.backward_input, "--backward-input"},
                         {d.backward_weight, "--backward-weight"},
                         {d.p2p, "--p2p"}})
    if (!(std::isfinite(v) && v >= 0))
      throw InputError(flag, fmt::format("is {}", v), "give seconds, 0 or more");
  const PipelineOrder order =
      build_pipeline_order(o, {"--pp", "--stages-per-rank", "--microbatches"});
  if (f.layers > 0)
    modules = split_decoder_into_stages(o.num_stages(), f.layers, 1, 1, split_fields);
  // A rank's stages, with their modules when --layers is given ("1:4-8").
  auto stages_text = [&](int r) {
    std::string out;
    for (int s : pipeline_rank_stages(o, r)) {
      if (!out.empty()) out += ' ';
      out += modules.empty() ? fmt::format("{}", s)
                             : fmt::format("{}:{}", s, format_stage_split({modules[s]}));
    }
    return out;
  };
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
                            {"modules", stages_text(r)},
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
  size_t width = 6;
  for (int r = 0; r < o.pp_size; ++r) width = std::max(width, stages_text(r).size());
  std::cout << fmt::format("{:>5}  {:<{}}  {:>9} {:>10} {:>10}\n", "rank", "stages", width,
                           "in flight", "busy", "idle");
  for (int r = 0; r < o.pp_size; ++r)
    std::cout << fmt::format("{:>5}  {:<{}}  {:>9} {:>10.4g} {:>10.4g}\n", r, stages_text(r), width,
                             peak[r], t.busy[r], t.makespan - t.busy[r]);
  std::cout << fmt::format("step {:.4g}, bubble {:.1f}% (idle share of all ranks)\n", t.makespan,
                           100.0 * t.bubble_fraction());
  if (f.actions)
    for (int r = 0; r < o.pp_size; ++r)
      std::cout << fmt::format("rank {}: {}\n", r, format_pipeline_actions(order[r]));
  return 0;
}

}  // namespace fullshard::cli
