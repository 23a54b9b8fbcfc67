#pragma once
// Training-curve pictures (docs/plots.md, "Training curves"): one panel each for the loss, the
// tokens/s and the peak allocated memory per step (the last two when some run has them), every
// run a line of its own colour. A static SVG, and an HTML page holding that SVG and a table of
// each run's first and last loss, median tokens/s and peak memory.
#include <string>
#include <vector>

#include "tools/plot/training_data.h"

namespace fullshard::plot {

std::string render_training_svg(const std::vector<TrainingRun>& runs, const std::string& title);
std::string render_training_html(const std::vector<TrainingRun>& runs, const std::string& title);
// "training: a vs b" from the run labels.
std::string default_training_title(const std::vector<TrainingRun>& runs);

}  // namespace fullshard::plot
