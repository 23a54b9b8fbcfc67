#include "tools/fullshard/run_flags.h"

#include <cstdio>
#include <string>

#include "core/common/error.h"

namespace fullshard::cli {

void add_run_options(CLI::App& c, runner::LaunchOptions& lo) {
  c.add_option("scenario", lo.scenario_path, "scenario JSON file")->required();
  c.add_option("--backend", lo.backend,
               "cpu (CPU processes over Gloo; 'gloo' is an alias) or cuda (one GPU per rank, "
               "NCCL); default: "
               "cpu for the 'cpu' hardware profile, cuda for GPU profiles");
  c.add_option("--collectives", lo.collectives,
               "CUDA backend: nccl (one GPU per rank) or gloo (staged through pinned host "
               "memory; ranks may "
               "share a GPU); default: nccl, gloo when ranks outnumber the GPUs")
      ->check(CLI::IsMember({"nccl", "gloo"}));
  c.add_option("--nproc", lo.nproc, "worker processes (default: the scenario's world size)");
  c.add_option("--steps", lo.steps, "optimizer steps (default: training.steps)");
  c.add_option("--data", lo.data,
               "train on these tokens instead of training.data: a token file (llm.c header, or "
               "--data-format), a "
               "folder or glob of shards, or a .txt / .jsonl file (byte-level)");
  c.add_option("--data-format", lo.data_format,
               "how --data is read (default: training.data.format, else auto)")
      ->check(CLI::IsMember({"auto", "llmc", "uint16", "uint32", "text", "jsonl"}));
  c.add_option("--timeout", lo.timeout_s,
               "seconds a collective may wait for its peers (default 60)");
  c.add_flag("--debug-collectives", lo.check_fingerprints,
             "exchange collective fingerprints before each collective (like "
             "TORCH_DISTRIBUTED_DEBUG=DETAIL)");
}

void check_run_options(const CLI::App& c, const runner::LaunchOptions& lo) {
  if (c.count("--nproc") > 0 && lo.nproc < 1)
    throw InputError("--nproc", "is " + std::to_string(lo.nproc),
                     "use 1 or more worker processes, or leave --nproc out for "
                     "the scenario's world size");
  if (c.count("--steps") > 0 && lo.steps < 0)
    throw InputError("--steps", "is " + std::to_string(lo.steps),
                     "use 0 or more optimizer steps, or leave --steps out for "
                     "training.steps");
}

void print_launch_errors(const runner::LaunchResult& r) {
  for (const auto& e : r.errors) std::fprintf(stderr, "fullshard: %s\n", e.c_str());
}

}  // namespace fullshard::cli
