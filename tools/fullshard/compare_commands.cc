#include "tools/fullshard/compare_commands.h"

#include <cstdio>
#include <iostream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/output_file.h"
#include "core/scenario/scenario.h"
#include "simulator/report.h"
#include "simulator/simulate.h"
#include "tools/fullshard/backends.h"
#include "tools/fullshard/op_table.h"
#include "tools/fullshard/run_flags.h"

namespace fullshard::cli {

CLI::App* add_compare_command(CLI::App& app, CompareFlags& f) {
  auto* compare = app.add_subcommand(
      "compare", "simulate a scenario, run it for real, compare peak memory per rank");
  add_run_options(*compare, f.launch);
  compare->add_option("--json", f.json_out, "write predicted vs measured per rank (JSON) here");
  f.command = compare;
  return compare;
}

int cmd_compare(const CompareFlags& f) {
  check_run_options(*f.command, f.launch);
  runner::LaunchOptions o = f.launch;
  o.progress = false;
  const std::string& json_out = f.json_out;
  Scenario s = runner::load_run_scenario(o);
  runner::validate_launch(o, s, real_backends().choose(o.backend, s));
  if (!json_out.empty()) {
    refuse_output_over_input("--json", json_out, {o.scenario_path, o.metrics_path});
    check_output_writable("--json", json_out);
  }
  std::fprintf(stderr, "simulating %s...\n", o.scenario_path.c_str());
  sim::SimulateOptions so;
  std::vector<PredictedKeyTimes> predicted_ops;
  so.on_played = keep_predicted_ops(&predicted_ops);
  Scenario sim_s = s;
  if (o.steps >= 0) sim_s.training.steps = o.steps;
  sim::SimulationReport pred = sim::simulate_scenario(sim_s, so);
  if (!pred.ok()) {
    std::cout << sim::report_summary(pred);
    std::fprintf(stderr,
                 "fullshard: the simulation did not complete cleanly; not running it for real\n");
    return pred.out_of_memory ? 3 : 1;
  }
  const runner::BackendKind& kind = real_backends().choose(o.backend, s);
  std::fprintf(stderr, "running %s for real: %d ranks on the %s backend...\n",
               o.scenario_path.c_str(), s.world_size(), kind.name.c_str());
  o.predicted_ops = std::move(predicted_ops);
  runner::LaunchResult real = runner::launch_local(o, real_backends());
  if (real.exit_code != 0) {
    print_launch_errors(real);
    return real.exit_code;
  }
  // With "routed" receive buffers (NOTE [Recorded routing]) the run sized its all-to-all outputs
  // from its router's split sizes, and with token dropping its combine from the kept rows (NOTE
  // [Receive buffers]); the prediction replays that routing, rank by rank.
  if (s.expert_parallel.degree > 1 &&
      (s.expert_parallel.receive_buffers == ReceiveBuffers::kRouted ||
       s.model.moe.drops_tokens())) {
    auto rec = std::make_shared<RecordedRouting>(real.routing);
    rec->source = "the run just made";
    FULLSHARD_CHECK(rec->calls.size() == static_cast<size_t>(s.world_size()),
                    "the run recorded no routing on some rank");
    std::fprintf(stderr, "replaying the run's routing in the simulator...\n");
    sim_s.training.moe_routing_record = std::move(rec);
    pred = sim::simulate_scenario(sim_s);
    if (!pred.ok()) {
      std::cout << sim::report_summary(pred);
      std::fprintf(stderr, "fullshard: the replay of the run's routing did not complete cleanly\n");
      return pred.out_of_memory ? 3 : 1;
    }
  }
  std::vector<const sim::RankClassReport*> by_rank(static_cast<size_t>(s.world_size()), nullptr);
  for (const auto& c : pred.classes)
    for (int r : c.ranks) by_rank[r] = &c;
  nlohmann::json ranks = nlohmann::json::array();
  bool all_equal = true;
  std::cout << fmt::format(
      "scenario {}: predicted (simulator) vs measured ({}), per rank\n", s.name,
      real.backend == "cpu" ? "CPU backend over Gloo" : real.backend + " backend");
  std::cout << fmt::format("  {:>4}  {:>16} {:>16}  {:>16} {:>16}  {}\n", "rank", "pred allocated",
                           "meas allocated", "pred reserved", "meas reserved", "");
  for (const auto& m : real.ranks) {
    const auto* p = by_rank[m.rank];
    FULLSHARD_CHECK(p != nullptr, "rank without a simulated class");
    // The start-up peaks too (NOTE [Initialisation modes]): the whole-run peaks include them,
    // but a model whose init peak is below its step peak would hide a wrong init there.
    const bool init_eq = p->init_peak_allocated_bytes == m.init_peak_allocated_bytes &&
                         p->init_peak_reserved_bytes == m.init_peak_reserved_bytes;
    const bool eq = p->peak_allocated_bytes == m.peak_allocated_bytes &&
                    p->peak_reserved_bytes == m.peak_reserved_bytes && init_eq;
    all_equal = all_equal && eq;
    std::cout << fmt::format("  {:>4}  {:>16} {:>16}  {:>16} {:>16}  {}\n", m.rank,
                             p->peak_allocated_bytes, m.peak_allocated_bytes,
                             p->peak_reserved_bytes, m.peak_reserved_bytes,
                             eq        ? "equal"
                             : init_eq ? "DIFFERENT"
                                       : "DIFFERENT (at init)");
    ranks.push_back({{"rank", m.rank},
                     {"predicted_peak_allocated_bytes", p->peak_allocated_bytes},
                     {"measured_peak_allocated_bytes", m.peak_allocated_bytes},
                     {"predicted_peak_reserved_bytes", p->peak_reserved_bytes},
                     {"measured_peak_reserved_bytes", m.peak_reserved_bytes},
                     {"predicted_init_peak_allocated_bytes", p->init_peak_allocated_bytes},
                     {"measured_init_peak_allocated_bytes", m.init_peak_allocated_bytes},
                     {"predicted_init_peak_reserved_bytes", p->init_peak_reserved_bytes},
                     {"measured_init_peak_reserved_bytes", m.init_peak_reserved_bytes},
                     {"equal", eq}});
  }
  std::cout
      << (all_equal
              ? "  ok: predicted peaks equal measured peaks to the byte on every rank\n"
              : "  MISMATCH: predicted and measured peaks differ (a bug: please report it)\n");
  const std::vector<KeyAverage> no_ops;
  const std::vector<KeyAverage>& last_ops = real.steps.empty() ? no_ops : real.steps.back().ops;
  std::cout << differ_most_text(last_ops, 5);
  if (!json_out.empty()) {
    nlohmann::json j{{"scenario", s.name},
                     {"world_size", s.world_size()},
                     {"equal", all_equal},
                     {"ranks", ranks}};
    j["ops"] = key_averages_json(last_ops);  // rank 0's last step (NOTE [Per-op times])
    write_output_file(json_out, j.dump(1) + "\n", "--json");
    std::cout << "  report written to " << json_out << "\n";
  }
  return all_equal ? 0 : 1;
}

}  // namespace fullshard::cli
