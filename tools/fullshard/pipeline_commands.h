#pragma once
// `fullshard pipeline --schedule NAME --pp N --microbatches M [--stages-per-rank V]`: the order
// in which each pp rank runs its stages' forward and backward actions under one of PyTorch's
// pipeline schedules (core/pipeline), the bubble that order leaves at given per-stage costs,
// and how many microbatches' activations each rank holds at its peak. docs/pipeline.md.
#include <string>

#include <CLI/CLI.hpp>

namespace fullshard::cli {

struct PipelineFlags {
  std::string schedule = "1F1B";
  int pp = 0;
  int stages_per_rank = 0;  // 0: the schedule's (1, or 2 for the V schedules)
  int microbatches = 0;
  int layers = 0;            // > 0: split a decoder of this many layers as torchtitan does
  int layers_per_stage = 0;  // torchtitan's pipeline_parallel_layers_per_stage (0: unset)
  double forward = 1.0, backward_input = 1.0, backward_weight = 1.0, p2p = 0.0;
  bool actions = false;  // print each rank's actions
  bool json = false;
};

CLI::App* add_pipeline_command(CLI::App& app, PipelineFlags& flags);
int cmd_pipeline(const PipelineFlags& flags);

}  // namespace fullshard::cli
