// What travels between the launcher and its workers survives the trip as text: a worker's
// StepMetrics and MeasuredRank records (NOTE [Worker messages]) and the run's options
// (NOTE [Worker options]), each through its one JSON writer and reader, dumped and parsed again.
// And the launcher combines every rank's step as StepSummary documents.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "runner/launch_options.h"
#include "runner/measured_rank.h"
#include "runner/step_aggregation.h"
#include "runner/step_metrics.h"

namespace fullshard::runner {
namespace {

nlohmann::json through_text(const nlohmann::json& j) { return nlohmann::json::parse(j.dump()); }

// Equal as the wire can keep them: NaN is NaN (its payload and sign are not kept).
bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

rc::Gen<double> gen_loss() {
  return rc::gen::weightedOneOf<double>({
      {6, rc::gen::arbitrary<double>()},
      {1, rc::gen::just(std::numeric_limits<double>::quiet_NaN())},
      {1, rc::gen::just(std::numeric_limits<double>::infinity())},
      {1, rc::gen::just(-std::numeric_limits<double>::infinity())},
  });
}

// What a table row can hold: non-negative finite numbers, calls exact in a double.
rc::Gen<double> gen_amount() {
  return rc::gen::map(rc::gen::arbitrary<double>(),
                      [](double v) { return std::isfinite(v) ? std::fabs(v) : 0.0; });
}

rc::Gen<KeyAverage> gen_row() {
  return rc::gen::apply(
      [](std::string key, std::string kind, int64_t calls, double m, double f, double b,
         bool predicted, double p) {
        KeyAverage r;
        r.key = std::move(key);
        r.kind = std::move(kind);
        r.calls = calls;
        r.measured_s = m;
        r.flops = f;
        r.bytes = b;
        r.predicted_s = predicted ? p : -1;
        return r;
      },
      rc::gen::container<std::string>(rc::gen::inRange<char>('a', 'z' + 1)),
      rc::gen::container<std::string>(rc::gen::inRange<char>('a', 'z' + 1)),
      rc::gen::inRange<int64_t>(0, int64_t{1} << 53), gen_amount(), gen_amount(), gen_amount(),
      rc::gen::arbitrary<bool>(), gen_amount());
}

rc::Gen<StepMetrics> gen_step_metrics() {
  return rc::gen::apply(
      [](int step, double loss, bool evaluated, double eval, double seconds, int64_t tokens,
         uint64_t pa, uint64_t pr, double compute, double comm, double exposed, double flops,
         std::vector<KeyAverage> ops) {
        StepMetrics m;
        m.step = step;
        m.loss = loss;
        m.eval_loss = evaluated ? eval : std::numeric_limits<double>::quiet_NaN();
        m.seconds = seconds;
        m.tokens = tokens;
        m.peak_allocated_bytes = pa;
        m.peak_reserved_bytes = pr;
        m.compute_s = compute;
        m.comm_s = comm;
        m.exposed_comm_s = exposed;
        m.flops = flops;
        m.ops = std::move(ops);
        return m;
      },
      rc::gen::arbitrary<int>(), gen_loss(), rc::gen::arbitrary<bool>(), gen_loss(),
      rc::gen::arbitrary<double>(), rc::gen::arbitrary<int64_t>(), rc::gen::arbitrary<uint64_t>(),
      rc::gen::arbitrary<uint64_t>(), rc::gen::arbitrary<double>(), rc::gen::arbitrary<double>(),
      rc::gen::arbitrary<double>(), rc::gen::arbitrary<double>(),
      rc::gen::resize(8, rc::gen::container<std::vector<KeyAverage>>(gen_row())));
}

void expect_same_rows(const std::vector<KeyAverage>& got, const std::vector<KeyAverage>& want) {
  RC_ASSERT(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    RC_ASSERT(got[i].key == want[i].key);
    RC_ASSERT(got[i].kind == want[i].kind);
    RC_ASSERT(got[i].calls == want[i].calls);
    RC_ASSERT(same(got[i].measured_s, want[i].measured_s));
    RC_ASSERT(same(got[i].flops, want[i].flops));
    RC_ASSERT(same(got[i].bytes, want[i].bytes));
    RC_ASSERT(same(got[i].predicted_s, want[i].predicted_s));
  }
}

RC_GTEST_PROP(RunnerMessages, StepMetricsSurviveTheWire, ()) {
  const StepMetrics m = *gen_step_metrics();
  const bool with_ops = *rc::gen::arbitrary<bool>();
  const StepMetrics got = step_metrics_from_json(through_text(step_metrics_json(m, with_ops)));
  RC_ASSERT(got.step == m.step);
  RC_ASSERT(same(got.loss, m.loss));
  RC_ASSERT(same(got.eval_loss, m.eval_loss));
  RC_ASSERT(same(got.seconds, m.seconds));
  RC_ASSERT(got.tokens == m.tokens);
  RC_ASSERT(got.peak_allocated_bytes == m.peak_allocated_bytes);
  RC_ASSERT(got.peak_reserved_bytes == m.peak_reserved_bytes);
  RC_ASSERT(same(got.compute_s, m.compute_s));
  RC_ASSERT(same(got.comm_s, m.comm_s));
  RC_ASSERT(same(got.exposed_comm_s, m.exposed_comm_s));
  RC_ASSERT(same(got.flops, m.flops));
  expect_same_rows(got.ops, with_ops ? m.ops : std::vector<KeyAverage>{});
}

TEST(RunnerMessages, NonFiniteLossesTravelAsStringsAndAMissingEvalIsNull) {
  StepMetrics m;
  m.loss = std::numeric_limits<double>::infinity();
  const nlohmann::json j = step_metrics_json(m);
  EXPECT_EQ(j["loss"], "inf");
  EXPECT_TRUE(j["eval_loss"].is_null());
  m.loss = std::nan("");
  m.eval_loss = -std::numeric_limits<double>::infinity();
  const nlohmann::json k = step_metrics_json(m);
  EXPECT_EQ(k["loss"], "nan");
  EXPECT_EQ(k["eval_loss"], "-inf");
}

RC_GTEST_PROP(RunnerMessages, MeasuredRankSurvivesTheWire, ()) {
  MeasuredRank m;
  m.rank = *rc::gen::inRange(0, 1 << 20);
  m.peak_allocated_bytes = *rc::gen::arbitrary<uint64_t>();
  m.peak_reserved_bytes = *rc::gen::arbitrary<uint64_t>();
  m.checkpoint.saves = *rc::gen::arbitrary<int>();
  m.checkpoint.mode = *rc::gen::element(CheckpointSaveMode::kSync, CheckpointSaveMode::kAsync);
  m.checkpoint.staging_bytes = *rc::gen::arbitrary<uint64_t>();
  m.checkpoint.exposed_s = *rc::gen::arbitrary<double>();
  m.checkpoint.background_s = *rc::gen::arbitrary<double>();
  m.checkpoint.hidden_s = *rc::gen::arbitrary<double>();
  // Path names are distinct and come back sorted (a JSON object).
  const auto paths = *rc::gen::container<std::map<std::string, int64_t>>(
      rc::gen::container<std::string>(rc::gen::inRange<char>('a', 'z' + 1)),
      rc::gen::arbitrary<int64_t>());
  m.path_counts.assign(paths.begin(), paths.end());
  const MeasuredRank got = measured_rank_from_json(through_text(measured_rank_json(m)), m.rank);
  RC_ASSERT(got.rank == m.rank);
  RC_ASSERT(got.peak_allocated_bytes == m.peak_allocated_bytes);
  RC_ASSERT(got.peak_reserved_bytes == m.peak_reserved_bytes);
  RC_ASSERT(got.checkpoint.saves == m.checkpoint.saves);
  RC_ASSERT(got.checkpoint.mode == m.checkpoint.mode);
  RC_ASSERT(got.checkpoint.staging_bytes == m.checkpoint.staging_bytes);
  RC_ASSERT(same(got.checkpoint.exposed_s, m.checkpoint.exposed_s));
  RC_ASSERT(same(got.checkpoint.background_s, m.checkpoint.background_s));
  RC_ASSERT(same(got.checkpoint.hidden_s, m.checkpoint.hidden_s));
  RC_ASSERT(got.path_counts == m.path_counts);
}

// Any bytes: paths need not be UTF-8.
rc::Gen<std::string> gen_text() { return rc::gen::arbitrary<std::string>(); }

RC_GTEST_PROP(RunnerMessages, LaunchOptionsSurviveTheWire, ()) {
  LaunchOptions o;
  o.scenario_path = *gen_text();
  o.backend = *gen_text();
  o.collectives = *gen_text();
  o.nproc = *rc::gen::arbitrary<int>();
  o.metrics_path = *gen_text();
  o.timeout_s = *rc::gen::arbitrary<int>();
  o.check_fingerprints = *rc::gen::arbitrary<bool>();
  o.steps = *rc::gen::arbitrary<int>();
  o.progress = *rc::gen::arbitrary<bool>();
  o.self_exe = *gen_text();
  o.collect_reports = *rc::gen::arbitrary<bool>();
  o.on_nonfinite =
      *rc::gen::element(LaunchOptions::OnNonFinite::kStop, LaunchOptions::OnNonFinite::kContinue);
  o.checkpoint_dir = *gen_text();
  o.checkpoint_every = *rc::gen::arbitrary<int>();
  o.keep_last = *rc::gen::arbitrary<int>();
  o.checkpoint_mode = *rc::gen::element(CheckpointSaveMode::kSync, CheckpointSaveMode::kAsync);
  o.resume = *gen_text();
  o.init_from = *gen_text();
  o.data = *gen_text();
  o.data_format = *gen_text();
  o.eval_every = *rc::gen::arbitrary<int>();
  o.eval_batches = *rc::gen::arbitrary<int>();
  // Every field travels: the JSON of what came back is the JSON that went.
  const nlohmann::json sent = launch_options_json(o);
  const LaunchOptions got = launch_options_from_json(through_text(sent), "$OPTIONS");
  RC_ASSERT(launch_options_json(got) == sent);
  RC_ASSERT(got.scenario_path == o.scenario_path);
  RC_ASSERT(got.data == o.data);
  RC_ASSERT(got.nproc == o.nproc);
  RC_ASSERT(got.steps == o.steps);
  RC_ASSERT(got.on_nonfinite == o.on_nonfinite);
  RC_ASSERT(got.eval_batches == o.eval_batches);
}

TEST(RunnerMessages, DefaultOptionsSurviveAndEveryFieldHasAKey) {
  const LaunchOptions d;
  const nlohmann::json j = launch_options_json(d);
  EXPECT_EQ(j.size(), 22u);  // every field of LaunchOptions but predicted_ops
  EXPECT_EQ(launch_options_json(launch_options_from_json(j, "$OPTIONS")), j);
  EXPECT_EQ(launch_options_json(launch_options_from_json(nlohmann::json::object(), "$O")), j);
}

TEST(RunnerMessages, BadOptionsNameTheKey) {
  auto where = [](const nlohmann::json& j) {
    try {
      launch_options_from_json(j, "$OPTIONS");
    } catch (const InputError& e) {
      return e.where();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(where({{"steps", "5"}}), "$OPTIONS.steps");
  EXPECT_EQ(where({{"steps", 1e12}}), "$OPTIONS.steps");
  EXPECT_EQ(where({{"on_nonfinite", "maybe"}}), "$OPTIONS.on_nonfinite");
  EXPECT_EQ(where({{"no_such_option", 1}}), "$OPTIONS.no_such_option");
  EXPECT_EQ(where({{"data", {{"hex", "4"}}}}), "$OPTIONS.data.hex");
  EXPECT_EQ(where(nlohmann::json::array()), "$OPTIONS");
}

StepMetrics rank_step(int step, double loss, double seconds, int64_t tokens, uint64_t peak) {
  StepMetrics m;
  m.step = step;
  m.loss = loss;
  m.seconds = seconds;
  m.tokens = tokens;
  m.peak_allocated_bytes = peak;
  m.peak_reserved_bytes = 2 * peak;
  m.flops = 10;
  m.comm_s = seconds / 2;
  return m;
}

TEST(RunnerMessages, AStepIsCompleteWhenEveryRankReportedIt) {
  StepAggregator agg(2, nullptr);
  EXPECT_FALSE(agg.add(1, rank_step(0, 3.0, 2.0, 100, 7)));
  EXPECT_FALSE(agg.add(1, rank_step(1, 2.0, 1.0, 100, 9)));  // step 1 before step 0 completes
  auto done = agg.add(0, rank_step(0, 5.0, 4.0, 100, 5));
  ASSERT_TRUE(done);
  const StepSummary& s = done->summary;
  EXPECT_EQ(s.step, 0);
  EXPECT_EQ(s.loss, 4.0);                // mean over ranks
  EXPECT_EQ(s.step_time_s, 4.0);         // slowest rank
  EXPECT_EQ(s.tokens_per_s, 200 / 4.0);  // all ranks' tokens over it
  EXPECT_EQ(s.flops_per_s, 20 / 4.0);
  EXPECT_EQ(s.peak_allocated_bytes, 7u);  // largest
  EXPECT_EQ(s.peak_reserved_bytes, 14u);
  EXPECT_EQ(s.comm_s, 2.0);
  EXPECT_TRUE(std::isnan(s.eval_loss));
  EXPECT_EQ(done->nonfinite_rank, -1);
  ASSERT_EQ(done->rank_losses.size(), 2u);
  EXPECT_EQ(done->rank_losses[0].first, 1);  // in the order the ranks reported
  const nlohmann::json line = metrics_line_json(*done);
  EXPECT_EQ(line["loss"], 4.0);
  EXPECT_EQ(line["nonfinite"], false);
  EXPECT_FALSE(line.contains("eval_loss"));

  auto next = agg.add(0, rank_step(1, std::numeric_limits<double>::infinity(), 1.0, 100, 9));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->nonfinite_rank, 0);
  EXPECT_TRUE(std::isinf(next->nonfinite_loss));
  const nlohmann::json bad = metrics_line_json(*next);
  EXPECT_TRUE(bad["loss"].is_null());
  EXPECT_EQ(bad["nonfinite"], true);
  EXPECT_TRUE(bad["ranks"][1]["loss"].is_null());
  EXPECT_EQ(bad["ranks"][0]["loss"], 2.0);
}

// NOTE [Pipeline losses] (runner/step_aggregation.cc): with pp only the last stage's ranks
// report a loss; the others' NaN neither counts in the mean nor stops the run, while a
// non-finite loss of a last-stage rank still does.
TEST(RunnerMessages, OnlyTheRanksWithALossCount) {
  StepAggregator agg(4, nullptr, {false, false, true, true});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  agg.add(0, rank_step(0, nan, 1.0, 100, 5));
  agg.add(1, rank_step(0, nan, 1.0, 100, 5));
  agg.add(2, rank_step(0, 3.0, 1.0, 100, 5));
  auto done = agg.add(3, rank_step(0, 5.0, 2.0, 100, 5));
  ASSERT_TRUE(done);
  EXPECT_EQ(done->summary.loss, 4.0);
  EXPECT_EQ(done->nonfinite_rank, -1);
  ASSERT_EQ(done->rank_losses.size(), 2u);
  EXPECT_EQ(done->rank_losses[0].first, 2);
  EXPECT_EQ(done->summary.tokens_per_s, 400 / 2.0);  // every rank's tokens
  agg.add(0, rank_step(1, nan, 1.0, 100, 5));
  agg.add(1, rank_step(1, nan, 1.0, 100, 5));
  agg.add(2, rank_step(1, nan, 1.0, 100, 5));
  auto diverged = agg.add(3, rank_step(1, 5.0, 2.0, 100, 5));
  ASSERT_TRUE(diverged);
  EXPECT_EQ(diverged->nonfinite_rank, 2);
}

// NOTE [Recorded routing] with pp (NOTE [MoE in pipeline stages]): every rank's routing reaches
// the --metrics line, the ranks without a loss as {rank, tokens_per_expert}, and a rank whose
// stages made no MoE call as an empty list, so a replay finds every rank of the job.
TEST(RunnerMessages, APipelinesRanksWithoutALossKeepTheirRouting) {
  StepAggregator agg(4, nullptr, {false, false, true, true}, /*routing=*/true);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int r = 0; r < 4; ++r) {
    StepMetrics m = rank_step(0, r < 2 ? nan : 3.0, 1.0, 100, 5);
    if (r != 1) m.tokens_per_expert = {{r, 4 - r}};  // rank 1: no MoE layer in its stages
    auto done = agg.add(r, std::move(m));
    if (r < 3) continue;
    ASSERT_TRUE(done);
    EXPECT_EQ(done->rank_routing.size(), 4u);
    const nlohmann::json line = metrics_line_json(*done);
    ASSERT_EQ(line["ranks"].size(), 4u);
    std::map<int, nlohmann::json> by_rank;
    for (const auto& e : line["ranks"]) by_rank[e["rank"].get<int>()] = e;
    EXPECT_FALSE(by_rank[0].contains("loss"));
    EXPECT_EQ(by_rank[0]["tokens_per_expert"], nlohmann::json::parse("[[0, 4]]"));
    EXPECT_TRUE(by_rank[1]["tokens_per_expert"].empty());
    EXPECT_EQ(by_rank[3]["loss"], 3.0);
    EXPECT_EQ(by_rank[3]["tokens_per_expert"], nlohmann::json::parse("[[3, 1]]"));
  }
}

TEST(RunnerMessages, RankZerosTableGetsTheSimulatorsTimesOfItsStep) {
  std::vector<PredictedKeyTimes> predicted = {{{key_id("a", "matmul"), 1.0}},
                                              {{key_id("a", "matmul"), 2.0}}};
  StepAggregator agg(1, &predicted);
  for (int step = 0; step < 3; ++step) {
    StepMetrics m = rank_step(step, 1.0, 1.0, 1, 1);
    m.ops = {KeyAverage{"a", "matmul", 1, 0.5, 0, 0, -1}};
    auto done = agg.add(0, m);
    ASSERT_TRUE(done);
    ASSERT_EQ(done->summary.ops.size(), 1u);
    EXPECT_EQ(done->summary.ops[0].predicted_s, step == 0 ? 1.0 : 2.0);  // the last for later
  }
}

}  // namespace
}  // namespace fullshard::runner
