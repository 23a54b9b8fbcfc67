// Training curves: the inputs (--metrics JSONL, step,loss CSV, a measured report) and the picture.
#include <algorithm>
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "core/common/error.h"
#include "tools/plot/training_plot.h"
#include "tests/support/input_error.h"

namespace fullshard::plot {
namespace {

using testing::input_error_of;

TEST(TrainingData, MetricsJsonlStepsFromOneAndNullLossesAreGaps) {
  const TrainingRun r = parse_metrics_jsonl(
      "{\"step\": 0, \"loss\": 5.5, \"tokens_per_s\": 100, \"peak_allocated_bytes\": 4096}\n\n"
      "{\"step\": 1, \"loss\": null, \"nonfinite\": true, \"tokens_per_s\": 120, "
      "\"peak_allocated_bytes\": 4096}\n",
      "runs/a.jsonl");
  EXPECT_EQ(r.label, "a");
  EXPECT_EQ(r.step, (std::vector<double>{1, 2}));
  EXPECT_EQ(r.loss[0], 5.5);
  EXPECT_TRUE(std::isnan(r.loss[1]));
  EXPECT_EQ(r.tokens_per_s, (std::vector<double>{100, 120}));
  EXPECT_EQ(r.peak_allocated, (std::vector<double>{4096, 4096}));
}

// NOTE [Per-op panel] (tools/plot/training_plot.cc): the last step's per-op table is read and
// drawn, measured beside predicted.
TEST(TrainingData, PerOpTableOfTheLastStepIsDrawnMeasuredBesidePredicted) {
  const TrainingRun r = parse_metrics_jsonl(
      "{\"step\": 0, \"loss\": 5.5, \"ops\": [{\"key\": \"old\", \"kind\": \"Fill\", "
      "\"measured_s\": 9}]}\n"
      "{\"step\": 1, \"loss\": 5.0, \"ops\": [{\"key\": \"layers.attention backward\", \"kind\": "
      "\"AttentionBackward\", "
      "\"calls\": 2, \"measured_s\": 0.004, \"predicted_s\": 0.002}, {\"key\": \"output\", "
      "\"kind\": \"Linear\", "
      "\"measured_s\": 0.001, \"predicted_s\": null}]}\n{\"step\": 2, \"loss\": 4.5}\n",
      "m.jsonl");
  ASSERT_EQ(r.last_ops.size(), 2u);
  EXPECT_EQ(r.last_ops_step, 2);
  EXPECT_EQ(r.last_ops[0].key, "layers.attention backward");
  EXPECT_EQ(r.last_ops[0].predicted_s, 0.002);
  EXPECT_TRUE(std::isnan(r.last_ops[1].predicted_s));
  const std::string svg = render_training_svg({r}, "t");
  EXPECT_NE(svg.find("per-op time of step 2"), std::string::npos);
  EXPECT_NE(svg.find("<title>measured 0.004000 s</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>predicted 0.002000 s</title>"), std::string::npos);
  EXPECT_EQ(svg.find("<title>predicted 0.000000"),
            std::string::npos);                                  // none drawn where none predicted
  EXPECT_NE(svg.find("predicted 2.000 ms"), std::string::npos);  // the sums in the title
  const std::string e = input_error_of([] {
    parse_metrics_jsonl(
        "{\"step\": 0, \"loss\": 1, \"ops\": [{\"kind\": \"Fill\", \"measured_s\": 1}]}\n",
        "m.jsonl");
  });
  EXPECT_NE(e.find("m.jsonl:1: ops[0].key"), std::string::npos) << e;
}

// --eval-every writes eval_loss on the evaluated steps only; the loss panel draws it dashed with
// dots.
TEST(TrainingData, ValidationLossIsReadAndDrawn) {
  const TrainingRun r = parse_metrics_jsonl(
      "{\"step\": 0, \"loss\": 5.5}\n{\"step\": 1, \"loss\": 5.0, \"eval_loss\": 5.25}\n{\"step\": "
      "2, \"loss\": 4.5}\n"
      "{\"step\": 3, \"loss\": 4.0, \"eval_loss\": 4.75}\n",
      "m.jsonl");
  ASSERT_EQ(r.eval_loss.size(), 4u);
  EXPECT_TRUE(std::isnan(r.eval_loss[0]));
  EXPECT_EQ(r.eval_loss[1], 5.25);
  EXPECT_EQ(r.eval_loss[3], 4.75);
  const std::string svg = render_training_svg({r}, "t");
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  size_t dots = 0;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1))
    ++dots;
  EXPECT_EQ(dots, 2u);
  EXPECT_NE(svg.find("last validation loss 4.7500"), std::string::npos);
  // Without eval_loss nothing changes.
  const TrainingRun plain = parse_metrics_jsonl("{\"step\": 0, \"loss\": 5.5}\n", "p.jsonl");
  EXPECT_TRUE(plain.eval_loss.empty());
  EXPECT_EQ(render_training_svg({plain}, "t").find("stroke-dasharray"), std::string::npos);
}

TEST(TrainingData, CsvOfAnotherTrainerWithOptionalColumns) {
  const TrainingRun r = parse_training_csv(
      "# torchtitan log\nstep, loss ,wps\n1,10.5,900\n2,nan,\n3,9.75,950\n", "pt.csv");
  EXPECT_EQ(r.label, "pt");
  EXPECT_EQ(r.step, (std::vector<double>{1, 2, 3}));
  EXPECT_TRUE(std::isnan(r.loss[1]));
  EXPECT_EQ(r.loss[2], 9.75);
  ASSERT_EQ(r.tokens_per_s.size(), 3u);
  EXPECT_TRUE(std::isnan(r.tokens_per_s[1]));
  EXPECT_TRUE(r.peak_allocated.empty());  // no such column
}

TEST(TrainingData, BadInputsNameTheFileLineAndField) {
  EXPECT_NE(input_error_of([] {
              parse_training_csv("step,loss\n1,2\n2,x7\n", "r.csv");
            }).find("r.csv:3: loss: is 'x7'"),
            std::string::npos);
  EXPECT_NE(input_error_of([] {
              parse_training_csv("iteration,value\n1,2\n", "r.csv");
            }).find("step,loss"),
            std::string::npos);
  EXPECT_NE(input_error_of([] {
              parse_training_csv("step,loss\n1,2,3\n", "r.csv");
            }).find("r.csv:2: has 3 cells for 2 columns"),
            std::string::npos);
  EXPECT_NE(input_error_of([] { parse_training_csv("step,loss\n", "r.csv"); }).find("has no steps"),
            std::string::npos);
  EXPECT_NE(input_error_of([] {
              parse_metrics_jsonl("{\"step\": 0}\nnot json\n", "m.jsonl");
            }).find("m.jsonl:2: is not a JSON object"),
            std::string::npos);
  EXPECT_NE(input_error_of([] {
              parse_metrics_jsonl("{\"step\": 0, \"loss\": \"high\"}\n", "m.jsonl");
            }).find("m.jsonl:1: loss: is \"high\""),
            std::string::npos);
  EXPECT_NE(input_error_of([] {
              parse_metrics_jsonl("{\"loss\": 1}\n", "m.jsonl");
            }).find("has no \"step\""),
            std::string::npos);
  // A line nested 100,000 deep was parsed whole and then dumped into the message: a stack
  // overflow (NOTE [Bounded JSON nesting]); a NUL ended the line early (NOTE [NUL in JSON text]).
  const std::string deep =
      "{\"step\": " + std::string(100000, '[') + std::string(100000, ']') + "}\n";
  EXPECT_NE(input_error_of([&] {
              parse_metrics_jsonl(deep, "d.jsonl");
            }).find("d.jsonl:1: is not a JSON object"),
            std::string::npos);
  EXPECT_NE(input_error_of([] {
              parse_metrics_jsonl(std::string("{\"step\": 0}") + '\0' + "x\n", "n.jsonl");
            }).find("n.jsonl:1: is not a JSON object"),
            std::string::npos);
}

TEST(TrainingPlot, OnePanelPerMetricAndOneLinePerRunWithGaps) {
  TrainingRun a = parse_metrics_jsonl(
      "{\"step\": 0, \"loss\": 5, \"tokens_per_s\": 10}\n{\"step\": 1, \"loss\": null, "
      "\"tokens_per_s\": 11}\n"
      "{\"step\": 2, \"loss\": 4, \"tokens_per_s\": 12}\n",
      "a<b>.jsonl");
  TrainingRun b = parse_training_csv("step,loss\n1,5.1\n2,4.6\n3,4.1\n", "torch.csv");
  const std::string svg = render_training_svg({a, b}, default_training_title({a, b}));
  EXPECT_NE(svg.find("training: a&lt;b&gt; vs torch"), std::string::npos);  // escaped
  EXPECT_NE(svg.find(">loss<"), std::string::npos);
  EXPECT_NE(svg.find(">tokens/s (all ranks)<"), std::string::npos);
  EXPECT_EQ(svg.find("peak allocated"), std::string::npos);  // no run has memory
  size_t paths = 0;
  for (size_t p = svg.find("<path d=\""); p != std::string::npos; p = svg.find("<path d=\"", p + 1))
    ++paths;
  EXPECT_EQ(paths, 3u);  // loss: a and b; tokens/s: a only
  // a's loss has a gap at step 2: its path restarts with a second M.
  const size_t first = svg.find("<path d=\"M");
  const std::string d = svg.substr(first, svg.find('"', first + 9) - first);
  EXPECT_EQ(std::count(d.begin(), d.end(), 'M'), 2) << d;
  const std::string html = render_training_html({a, b}, "t");
  EXPECT_NE(html.find("<td>4.0000</td>"), std::string::npos);  // a's last loss
  EXPECT_NE(html.find("<svg"), std::string::npos);
}

}  // namespace
}  // namespace fullshard::plot
