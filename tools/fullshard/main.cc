// fullshard: FSDP2-style sharded training, simulated before it runs. main() only registers the
// commands; each lives in its own file (add_X_command adds its flags, cmd_X runs it):
//   simulate    SCENARIO.json [--json R.json] [--ranks classes|all] [--timeline T] [--trace T]
//                                                               simulate_commands.cc
//   train       SCENARIO.json [--backend cpu|cuda] [--nproc N] [--steps K] [--metrics M.jsonl]
//                                                               train_commands.cc, run_flags.cc
//   compare     SCENARIO.json [--json OUT.json]                 compare_commands.cc, run_flags.cc
//   plot        REPORT.json|METRICS.jsonl|RUN.csv ... -o OUT.html|OUT.svg   plot_commands.cc
//   plan        --model NAME|--hf-config C.json|--scenario S.json --gpus N --gpu PROFILE
//               --seq-len L [--global-batch B] ...              plan_commands.cc
//   calibrate   MEASUREMENTS... [--hardware PROFILE] [-o FITTED.json]   calibrate_commands.cc
//   checkpoint  inspect DIR | export DIR --safetensors OUT      checkpoint_commands.cc
//   data        tokenize IN... -o OUT.bin | inspect PATH        data_commands.cc
//   models      [--json]                                        models_commands.cc
// Exit codes: 0 ok; 1 the simulation found protocol problems, a rank failed, or predicted and
// measured memory differ; 2 bad input; 3 out of memory (plan: nothing fits).
#include <CLI/CLI.hpp>

#include <iostream>

#include "core/common/build_info.h"
#include "core/common/error.h"
#include "core/common/user_text.h"
#include "tools/fullshard/calibrate_commands.h"
#include "tools/fullshard/checkpoint_commands.h"
#include "tools/fullshard/compare_commands.h"
#include "tools/fullshard/data_commands.h"
#include "tools/fullshard/models_commands.h"
#include "tools/fullshard/pipeline_commands.h"
#include "tools/fullshard/plan_commands.h"
#include "tools/fullshard/plot_commands.h"
#include "tools/fullshard/simulate_commands.h"
#include "tools/fullshard/train_commands.h"

int main(int argc, char** argv) {
  namespace cli = fullshard::cli;
  CLI::App app{"fullshard: PyTorch-FSDP2-style sharded training, simulated before it runs"};
  app.set_version_flag("--version", fullshard::build_description());
  app.require_subcommand(1);
  // Each command's flags live in its own struct, registered in this order (the order --help
  // lists them in); exactly one command runs.
  cli::SimulateFlags simulate_flags;
  auto* simulate = cli::add_simulate_command(app, simulate_flags);
  cli::TrainFlags train_flags;
  auto* train = cli::add_train_command(app, train_flags);
  cli::CompareFlags compare_flags;
  auto* compare = cli::add_compare_command(app, compare_flags);
  cli::PlotFlags plot_flags;
  auto* plot = cli::add_plot_command(app, plot_flags);
  cli::PlanFlags plan_flags;
  auto* plan = cli::add_plan_command(app, plan_flags);
  cli::CalibrateFlags calibrate_flags;
  auto* calibrate = cli::add_calibrate_command(app, calibrate_flags);
  cli::CheckpointFlags checkpoint_flags;
  auto* checkpoint = cli::add_checkpoint_command(app, checkpoint_flags);
  cli::DataFlags data_flags;
  auto* data = cli::add_data_command(app, data_flags);
  cli::ModelsFlags models_flags;
  auto* models = cli::add_models_command(app, models_flags);
  cli::PipelineFlags pipeline_flags;
  auto* pipeline = cli::add_pipeline_command(app, pipeline_flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "fullshard: " << e.what() << " (run `fullshard --help`)\n";
    return 2;
  }
  try {
    if (*simulate) return cli::cmd_simulate(simulate_flags);
    if (*plot) return cli::cmd_plot(plot_flags);
    if (*models) return cli::cmd_models(models_flags);
    if (*plan) return cli::cmd_plan(plan_flags);
    if (*calibrate) return cli::cmd_calibrate(calibrate_flags);
    if (*checkpoint) return cli::cmd_checkpoint(checkpoint_flags);
    if (*data) return cli::cmd_data(data_flags);
    if (*pipeline) return cli::cmd_pipeline(pipeline_flags);
    if (*train) return cli::cmd_train(train_flags);
    if (*compare) return cli::cmd_compare(compare_flags);
  } catch (const fullshard::InputError& e) {
    std::cerr << "fullshard: error: " << e.what() << "\n";
    return 2;
  } catch (const fullshard::InternalError& e) {
    std::cerr << "fullshard: " << fullshard::printable(e.what(), 1024)
              << " (please report this bug)\n";
    return 70;
  } catch (const std::exception& e) {
    std::cerr << "fullshard: error: " << fullshard::printable(e.what(), 1024) << "\n";
    return 1;
  }
  return 0;
}
