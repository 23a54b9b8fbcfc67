#include "runner/launcher.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/user_text.h"
#include "core/scenario/moe_checks.h"
#include "core/scenario/scenario.h"
#include "runner/checkpoint.h"
#include "runner/init_weights.h"
#include "runner/metrics_file.h"
#include "runner/progress.h"
#include "runner/rank_runner.h"
#include "runner/worker_processes.h"

namespace fullshard::runner {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kReportFd = 3;  // the worker's end of its launcher pipe

std::string format_loss(double v) { return std::isnan(v) ? "nan" : fmt::format("{}", v); }

// What the run trains on, on stderr (validate_launch has checked the data).
void print_data(const Scenario& s) {
  const DataOptions& d = s.training.data;
  const DataFormat f = data_format_from_name(d.format);
  const TextTokenizer tok =
      make_text_tokenizer(d.tokenizer, "training.data.tokenizer",
                          {d.bos, d.eos, "training.data.bos", "training.data.eos"});
  const auto tokens = open_token_source(d.path, f, "training.data", &tok);
  std::fprintf(stderr, "data: %s, %s\n", printable(tokens->describe(), 1024).c_str(),
               d.sampling == "random"
                   ? "random windows"
                   : fmt::format("{} sequences of {} tokens per epoch, read {}",
                                 (tokens->size() - 1) / s.training.seq_len, s.training.seq_len,
                                 d.sampling == "shuffle" ? "in a shuffled order" : "in order")
                         .c_str());
  if (!d.val_path.empty())
    std::fprintf(
        stderr, "validation data: %s\n",
        printable(open_token_source(d.val_path, f, "training.data.val_path", &tok)->describe(),
                  1024)
            .c_str());
}

// A fresh rendezvous directory under the temporary directory (honours $TMPDIR).
std::string make_rendezvous_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "fullshard-rdzv-XXXXXX").string();
  if (!mkdtemp(tmpl.data()))
    throw std::runtime_error(std::string("cannot create a rendezvous directory: ") +
                             strerror(errno));
  return tmpl;
}

// Rank r's process: this binary as `fullshard train SCENARIO` (the scenario for ps), with
// torchrun's variables, the rendezvous and report settings, and the run's options as one
// message (NOTE [Worker options]).
std::vector<WorkerCommand> worker_commands(const LaunchOptions& o, const BackendKind& kind, int n,
                                           const std::string& store_dir,
                                           const std::string& resume_folder) {
  LaunchOptions w = o;
  w.backend = kind.name;
  w.resume = resume_folder;  // resolved once, here
  if (!w.data.empty()) w.data = std::filesystem::absolute(o.data).string();
  w.predicted_ops.clear();
  const std::string message = launch_options_json(w).dump();
  WorkerCommand c;
  c.exe =
      o.self_exe.empty() ? std::filesystem::read_symlink("/proc/self/exe").string() : o.self_exe;
  c.argv = {"fullshard", "train", o.scenario_path};
  if (kind.name == "cpu")
    c.env_defaults = {{"OPENBLAS_NUM_THREADS", "1"}};  // one BLAS thread per rank unless told
  std::vector<WorkerCommand> out;
  for (int r = 0; r < n; ++r) {
    c.env = {{"RANK", std::to_string(r)},        {"LOCAL_RANK", std::to_string(r)},
             {"WORLD_SIZE", std::to_string(n)},  {"LOCAL_WORLD_SIZE", std::to_string(n)},
             {"FULLSHARD_STORE_DIR", store_dir}, {"FULLSHARD_REPORT_FD", std::to_string(kReportFd)},
             {kWorkerOptionsVariable, message}};
    if (o.collect_reports) c.env.emplace_back("FULLSHARD_REPORT_DIR", store_dir + "/reports");
    out.push_back(c);
  }
  return out;
}

}  // namespace

uint64_t host_memory_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

void validate_launch(const LaunchOptions& o, const Scenario& s, const BackendKind& kind) {
  const int world = s.world_size();
  if (o.nproc < 0)
    throw InputError("--nproc", fmt::format("is {}", o.nproc),
                     "use a positive number of processes");
  const int n = o.nproc == 0 ? world : o.nproc;
  if (n != world)
    throw InputError("--nproc", fmt::format("is {}, but fsdp.mesh.shape has {} ranks", n, world),
                     fmt::format("use --nproc {} or change the mesh", world));
  if (o.steps < -1)
    throw InputError("--steps", fmt::format("is {}", o.steps), "use 0 or more optimizer steps");
  if (s.tensor_parallel.async)  // NOTE [Async TP] in core/model/async_tp.cc
    throw InputError("tensor_parallel.async",
                     fmt::format("is true, which the {} backend does not run", kind.name),
                     "write false to train for real (the numbers are the same), or simulate it "
                     "with fullshard simulate");
  // Mesh dims the CPU and CUDA backends train (docs/context-parallel.md, docs/pipeline.md: ring
  // attention's kinds and the stage-to-stage transfers; on CUDA built and host-tested, not yet run
  // on a GPU).
  auto cpu_or_cuda = [&](const char* dim, int degree, const char* what) {
    if (degree > 1 && kind.name != "cpu" && kind.name != "cuda")
      throw InputError("fsdp.mesh.dim_names",
                       fmt::format("has a {} dim of size {}: the {} backend does not run {}", dim,
                                   degree, kind.name, what),
                       fmt::format("train it with --backend cpu or cuda, simulate it with "
                                   "fullshard simulate, or train without the {} dim",
                                   dim));
  };
  cpu_or_cuda("cp", s.context_parallel.degree, "context parallelism");
  cpu_or_cuda("pp", s.pipeline.enabled() ? s.pipeline.degree : 1, "pipeline parallelism");
  if (s.pipeline.enabled()) {
    // What a pipeline program does not run yet (the scenario refuses the rest).
    auto refuse = [&](const char* flag, const std::string& what) {
      throw InputError(flag, what + " with a pp dim, which pipeline stages do not run yet",
                       std::string("remove ") + flag + " (docs/pipeline.md, \"Not built yet\")");
    };
    if (o.checkpoint_every > 0) refuse("--checkpoint-every", "is given");
    if (!o.resume.empty()) refuse("--resume", "is given");
    if (o.eval_every > 0) refuse("--eval-every", "is given");
    if (!o.init_from.empty()) refuse("--init-from", "is given");
    if (!s.model_weights.empty())
      throw InputError("model.weights",
                       "is set with a pp dim, which pipeline stages do not load yet",
                       "remove model.weights (docs/pipeline.md, \"Not built yet\")");
  }
  if (!s.fsdp.ignored_params.empty()) {
    // Checkpoints and loaded weights are FSDP shards (NOTE [What ignored parameters compose
    // with] in core/scenario/scenario_ignored.cc).
    auto refuse = [&](const char* flag) {
      throw InputError(flag,
                       "is given with fsdp.ignored_params, whose parameters are not in a "
                       "checkpoint's FSDP pieces yet",
                       std::string("remove ") + flag + ", or fsdp.ignored_params");
    };
    if (o.checkpoint_every > 0) refuse("--checkpoint-every");
    if (!o.resume.empty()) refuse("--resume");
    if (!o.init_from.empty()) refuse("--init-from");
  }
  // QLoRA's NF4 kinds run on the CPU backend only (docs/qlora.md); NF4 shards are not in a
  // checkpoint's pieces yet.
  if (s.training.nf4.enabled) {
    if (kind.name != "cpu")
      throw InputError("training.frozen_dtype",
                       fmt::format("is \"nf4\", which the {} backend does not run", kind.name),
                       "train it with --backend cpu, or simulate it (docs/qlora.md)");
    auto refuse = [&](const char* flag) {
      throw InputError(flag,
                       "is given with training.frozen_dtype \"nf4\", whose shards are not "
                       "in a checkpoint's pieces yet",
                       std::string("remove ") + flag + " (docs/qlora.md)");
    };
    if (o.checkpoint_every > 0) refuse("--checkpoint-every");
    if (!o.resume.empty()) refuse("--resume");
    if (!o.init_from.empty()) refuse("--init-from");
  }
  // The MoE kinds run on the CPU backend's kernels (cpu::has_kernel) and the CUDA backend's
  // (backends/cuda/kernels/moe_*.cu: built and host-tested, not yet run on a GPU), expert
  // parallelism's all-to-all-v over Gloo, NCCL and staged Gloo (docs/moe.md).
  if (s.model.moe.enabled() && kind.name != "cpu" && kind.name != "cuda")
    throw InputError("model.moe",
                     fmt::format("has {} experts, which the {} backend does not run",
                                 s.model.moe.num_experts, kind.name),
                     "train it with --backend cpu or cuda, or simulate it with fullshard simulate "
                     "(docs/moe.md)");
  // DeepSeek-V3's expert bias and group-limited routing (NOTE [Expert bias] in
  // core/model/expert_bias.h): CPU kernels only (cuda::has_kernel leaves them out). The bias
  // buffer is saved and resumed with checkpoints (NOTE [Persistent buffers in checkpoints] in
  // core/checkpoint/checkpoint_metadata.h) and loaded from weight files (runner/init_weights.cc).
  if (s.model.moe.enabled() &&
      (s.model.moe.load_balance == MoeLoadBalance::kExpertBias ||
       s.model.moe.num_expert_groups > 1)) {
    const bool bias = s.model.moe.load_balance == MoeLoadBalance::kExpertBias;
    if (kind.name != "cpu")
      throw InputError(bias ? "model.moe.load_balance" : "model.moe.num_expert_groups",
                       fmt::format("is {}, whose router ops the {} backend has no kernels for "
                                   "yet",
                                   bias ? "\"expert_bias\"" : "above 1", kind.name),
                       "train it with --backend cpu, or simulate it (docs/moe.md)");
  }
  // The auxiliary load-balancing loss (NOTE [Auxiliary load-balancing loss] in
  // core/model/moe_aux_loss.h): CPU kernels only (cuda::has_kernel leaves them out).
  if (s.model.moe.enabled() && s.model.moe.load_balance == MoeLoadBalance::kAuxLoss &&
      kind.name != "cpu")
    throw InputError("model.moe.load_balance",
                     fmt::format("is \"aux_loss\", whose ops the {} backend has no kernels for "
                                 "yet",
                                 kind.name),
                     "train it with --backend cpu, or simulate it (docs/moe.md)");
  // Multi-head latent attention: the CPU backend's attention takes v's own head size; the CUDA
  // attention kernels do not yet (backends/cuda/kernels/plan.cc refuses the op too).
  if (s.model.mla.enabled()) {
    if (kind.name != "cpu" && s.model.mla.v_head_dim != s.model.mla.qk_head_dim())
      throw InputError("model.mla",
                       fmt::format("has v_head_dim {} != qk head dim {}, whose attention op "
                                   "(kAttentionEfficient with v_head_dim) the {} backend has no "
                                   "kernel for yet",
                                   s.model.mla.v_head_dim, s.model.mla.qk_head_dim(), kind.name),
                       "train it with --backend cpu, or simulate it with fullshard simulate");
  }
  // The CPU backend emulates float8 (backends/cpu/kernels/float8.cc); the CUDA backend runs the
  // tensorwise recipe (its casts and cuBLASLt's float8 GEMM, built but not yet run on a GPU); the
  // rowwise recipes need cuBLASLt's outer-vector scales, not built (docs/float8.md).
  if (s.training.float8.enabled() && kind.name != "cpu") {
    if (kind.name != "cuda")
      throw InputError("training.float8",
                       fmt::format("is recipe \"{}\", which the {} backend does not run",
                                   float8_recipe_name(s.training.float8.recipe), kind.name),
                       "train it with --backend cpu or cuda (docs/float8.md)");
    if (s.training.float8.recipe != Float8Recipe::kTensorwise)
      throw InputError("training.float8.recipe",
                       fmt::format("is \"{}\", whose per-row scales the CUDA backend's float8 "
                                   "GEMM does not take yet",
                                   float8_recipe_name(s.training.float8.recipe)),
                       "use \"tensorwise\" on --backend cuda, or train it with --backend cpu "
                       "(docs/float8.md, \"Not built yet\")");
  }
  validate_checkpoint_flags(o.checkpoint_dir, o.checkpoint_every, o.resume,
                            o.steps >= 0 ? o.steps : s.training.steps, s, o.keep_last);
  batch_source(s);  // the training data: missing, malformed, tokens >= vocab_size (NOTE [Token data
                    // sampling])
  if (o.eval_every < 0)
    throw InputError("--eval-every", fmt::format("is {}", o.eval_every),
                     "use 0 (never) or more steps");
  if (o.eval_batches < 1)
    throw InputError("--eval-batches", fmt::format("is {}", o.eval_batches),
                     "use 1 or more validation batches");
  if (o.eval_every > 0 && s.training.data.val_path.empty())
    throw InputError(
        "--eval-every", fmt::format("is {}, but the scenario has no validation data", o.eval_every),
        "add training.data.val_path (fullshard data tokenize --val-fraction writes one)");
  if (!o.init_from.empty()) {
    if (!o.resume.empty())
      throw InputError("--init-from", "is given with --resume",
                       "give one: a checkpoint has its own weights");
    validate_init_weights(o.init_from,
                          s);  // every real backend loads them (Backend::copy_from_host)
  } else if (!s.model_weights.empty() && o.resume.empty()) {
    validate_init_weights(s.model_weights, s, "model.weights");
  }
  // Deadlines add seconds to a clock: a week is more than any collective needs and cannot overflow.
  constexpr int kMaxTimeout = 7 * 24 * 3600;
  if (o.timeout_s <= 0 || o.timeout_s > kMaxTimeout)
    throw InputError("--timeout", fmt::format("is {}", o.timeout_s),
                     fmt::format("use a number of seconds from 1 to {} (a week)", kMaxTimeout));
  if (kind.device_count) {
    const int devices = kind.device_count();
    if (devices == 0)
      throw InputError(
          "--backend", fmt::format("is '{}', but this machine has no GPU", kind.name),
          "run on a machine with GPUs, or pass --backend cpu to train on CPU processes");
  }
  // NOTE [CPU workers of a GPU scenario]: each CPU worker may use up to the profile's device
  // capacity of host memory; refuse up front rather than let the OOM killer pick a victim.
  if (kind.name == "cpu" && !is_cpu_scenario(s)) {
    const uint64_t per_rank = s.hardware.allocator.capacity_bytes;
    const uint64_t need = per_rank * static_cast<uint64_t>(n);
    const uint64_t have = host_memory_available_bytes();
    if (have > 0 && need > have)
      throw InputError(
          "hardware.memory_bytes",
          fmt::format(
              "lets each of {} CPU workers use {:.1f} GiB ({} profile), {:.1f} GiB in all, but the "
              "host has {:.1f} GiB available",
              n, per_rank / 1073741824.0, s.hardware.device.name, need / 1073741824.0,
              have / 1073741824.0),
          fmt::format(
              "set hardware.memory_bytes to at most {} to train what fits on this host, or run "
              "on GPUs",
              have / static_cast<uint64_t>(n) / 1048576 * 1048576));
  }
}

LaunchResult launch_local(const LaunchOptions& o, const BackendRegistry& backends) {
  LaunchResult res;
  const auto start = Clock::now();
  Scenario s = load_run_scenario(o);  // bad input fails here, before any process
  res.routing.num_experts = s.model.moe.num_experts;
  if (o.progress && s.training.data.given()) print_data(s);
  const int n = s.world_size();
  const BackendKind& kind = backends.choose(o.backend, s);
  validate_launch(o, s, kind);
  const std::string resume_folder = resolve_resume(o.resume, o.checkpoint_dir);
  res.backend = kind.name;
  const int steps = o.steps >= 0 ? o.steps : s.training.steps;
  MetricsFile metrics(o.metrics_path, o.scenario_path);  // NOTE [Metrics file]
  const std::string store_dir = make_rendezvous_dir();
  WorkerProcesses workers(worker_commands(o, kind, n, store_dir, resume_folder), kReportFd);

  Progress progress(steps, o.progress);
  StepAggregator aggregator(n, &o.predicted_ops, loss_ranks(s), s.model.moe.enabled());
  const std::string call_order = s.model.moe.enabled() ? moe_call_order(s) : std::string();
  res.routing.call_order = call_order;
  res.ranks.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) res.ranks[r].rank = r;
  bool metrics_failed = false;
  bool interrupted = false;
  const bool stop_on_nonfinite = o.on_nonfinite == LaunchOptions::OnNonFinite::kStop;

  auto on_step = [&](const CompletedStep& done) {
    const StepSummary& st = done.summary;
    res.steps.push_back(st);
    for (const auto& [r, calls] : done.rank_routing) {
      if (res.routing.calls.size() <= static_cast<size_t>(r)) res.routing.calls.resize(r + 1);
      auto& mine = res.routing.calls[static_cast<size_t>(r)];
      mine.insert(mine.end(), calls.begin(), calls.end());
    }
    nlohmann::json line = metrics_line_json(done);
    if (s.model.moe.enabled()) line["moe_call_order"] = call_order;  // NOTE [Recorded routing]
    if (!metrics.write(line) && !metrics_failed) {
      // A full disk, an I/O error: never a silent half line.
      metrics_failed = true;
      res.errors.push_back(
          fmt::format("launcher: writing the metrics to '{}' failed (disk full?); stopped",
                      metrics.writing_path()));
      if (res.exit_code == 0) res.exit_code = 1;
      workers.stop();
    }
    progress.step(st, std::chrono::duration<double>(Clock::now() - start).count());
    if (done.nonfinite_rank < 0 || res.nonfinite_step >= 0) return;
    res.nonfinite_step = st.step;
    progress.interrupt();
    if (stop_on_nonfinite) {
      res.errors.push_back(
          fmt::format("rank {}: the loss is {} at step {}: training diverged; stopped (lower "
                      "training.optimizer.lr, set "
                      "training.optimizer.max_grad_norm, or pass --on-nonfinite continue)",
                      done.nonfinite_rank, format_loss(done.nonfinite_loss), st.step + 1));
      if (res.exit_code == 0) res.exit_code = 1;
      workers.stop();
    } else {
      std::fprintf(stderr,
                   "fullshard: warning: rank %d: the loss is %s at step %d; going on "
                   "(--on-nonfinite continue)\n",
                   done.nonfinite_rank, format_loss(done.nonfinite_loss).c_str(), st.step + 1);
    }
  };

  WorkerEvents events;
  events.line = [&](int /*pipe*/, const std::string& text) {  // NOTE [Worker messages]
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return;
    const std::string type = j.value("type", "");
    const int r = j.value("rank", -1);
    if (r < 0 || r >= n) return;
    if (type == "step") {
      if (auto done = aggregator.add(r, step_metrics_from_json(j))) on_step(*done);
    } else if (type == "final") {
      res.ranks[r] = measured_rank_from_json(j, r);
    } else if (type == "error") {
      progress.interrupt();
      res.errors.push_back(fmt::format("rank {}: error: {}", r, j.value("message", "")));
      if (j.value("input", false) && res.exit_code == 0) res.exit_code = 2;
    }
  };
  events.interrupted = [&](int sig) {
    interrupted = true;
    progress.interrupt();
    res.errors.push_back(
        fmt::format("launcher: interrupted by {} after {} complete steps; workers stopped",
                    sig == SIGINT ? "SIGINT" : "SIGTERM", res.steps.size()));
    res.exit_code = 130;
  };
  events.failed = [&](int, int) {
    if (res.exit_code == 0) res.exit_code = 1;
  };
  events.killed_after_grace = [&](int r) {
    res.errors.push_back(
        fmt::format("rank {}: did not stop within the collective timeout; killed", r));
  };
  // A failed rank's peers fail their next collective within the timeout; then they are killed.
  workers.run(events, std::chrono::seconds(o.timeout_s + 5));

  const bool stopped_on_purpose =
      interrupted || metrics_failed || (res.nonfinite_step >= 0 && stop_on_nonfinite);
  const std::vector<int> statuses = workers.wait_statuses();
  for (int r = 0; r < n && !stopped_on_purpose; ++r) {
    if (WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 0) continue;
    bool reported = false;
    for (const auto& e : res.errors)
      reported = reported || e.rfind(fmt::format("rank {}:", r), 0) == 0;
    if (!reported) res.errors.push_back(fmt::format("rank {}: {}", r, describe_exit(statuses[r])));
  }
  if (o.collect_reports && res.exit_code == 0) {
    for (int r = 0; r < n; ++r) {
      std::ifstream f(store_dir + "/reports/rank" + std::to_string(r) + ".json");
      auto j = nlohmann::json::parse(f, nullptr, false);
      if (j.is_discarded()) {
        res.errors.push_back(fmt::format("rank {}: wrote no measured report", r));
        res.exit_code = 1;
        res.rank_reports.clear();
        break;
      }
      res.rank_reports.push_back(std::move(j));
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(store_dir, ec);
  bool rename_failed = false;
  const std::string metrics_line =
      metrics.finish(res.exit_code == 0 && !metrics_failed, &rename_failed);
  if (!metrics_line.empty()) res.errors.push_back(metrics_line);
  if (rename_failed) res.exit_code = 1;
  res.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  return res;
}

}  // namespace fullshard::runner
