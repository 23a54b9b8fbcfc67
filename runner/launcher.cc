#include "runner/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/file_store.h>
#include <nlohmann/json.hpp>

#include "backends/gloo/tcp_store.h"
#include "runner/checkpoint.h"
#include "runner/init_weights.h"
#include "core/common/user_text.h"
#include "core/common/error.h"
#include "runner/rank_runner.h"
#include "core/scenario/scenario.h"

namespace fullshard::runner {
namespace {

using Clock = std::chrono::steady_clock;

// NOTE [Interrupted launcher]: SIGINT / SIGTERM only set a flag; the launcher's loop then kills
// the workers, removes the rendezvous directory, keeps the metrics under their .partial name
// and says what was done, instead of dying with everything left behind.
volatile std::sig_atomic_t g_interrupted = 0;
void on_interrupt(int sig) { g_interrupted = sig; }
constexpr int kReportFd = 3;  // the worker's end of its launcher pipe

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v)
    throw InputError(std::string("$") + name, "is not set", "set it (torchrun-style launch)");
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > std::numeric_limits<int>::max() || errno == ERANGE)
    throw InputError(std::string("$") + name, std::string("is '") + v + "'",
                     "set a non-negative integer");
  return static_cast<int>(x);
}

// NOTE [Non-finite loss]: JSON has no NaN or infinity (nlohmann writes them as null), so a
// worker sends a non-finite loss as the string "nan", "inf" or "-inf" and the launcher reads
// both forms back; metrics lines carry null for it, with "nonfinite": true.
nlohmann::json loss_json(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

double loss_of(const nlohmann::json& j, const char* key = "loss") {
  auto it = j.find(key);
  if (it == j.end()) return 0.0;
  if (it->is_number()) return it->get<double>();
  if (it->is_string()) {
    const std::string v = it->get<std::string>();
    if (v == "inf") return HUGE_VAL;
    if (v == "-inf") return -HUGE_VAL;
  }
  return std::nan("");
}

std::string format_loss(double v) { return std::isnan(v) ? "nan" : fmt::format("{}", v); }

void write_line(int fd, const nlohmann::json& j) {
  if (fd < 0) return;
  std::string s = j.dump() + "\n";
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // launcher gone: nothing to report to
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  int t = static_cast<int>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

double eval_loss_of(const nlohmann::json& j) { return loss_of(j, "eval_loss"); }

// The progress display: a bar redrawn in place on a terminal, about ten lines otherwise.
class Progress {
 public:
  Progress(int steps, bool enabled)
      : steps_(steps), enabled_(enabled), tty_(isatty(STDERR_FILENO)) {}
  void step(const StepSummary& s, double elapsed) {
    if (!enabled_) return;
    const int done = s.step + 1;
    const double eta = elapsed / done * (steps_ - done);
    std::string stats = fmt::format("loss {:.4f} | {:.0f} tok/s | {:.2f} s/step | ETA {}", s.loss,
                                    s.tokens_per_s, s.step_time_s, format_duration(eta));
    if (tty_) {
      const int width = 24, fill = steps_ > 0 ? width * done / steps_ : width;
      std::fprintf(stderr, "\r  step %d/%d [%s%s] %s   %s", done, steps_,
                   std::string(fill, '#').c_str(), std::string(width - fill, '.').c_str(),
                   stats.c_str(), done == steps_ ? "\n" : "");
    } else if (done == 1 || done == steps_ || done % std::max(1, steps_ / 10) == 0) {
      // Not a terminal (a log): about ten lines per run, not one per step.
      std::fprintf(stderr, "  step %d/%d: %s\n", done, steps_, stats.c_str());
    }
    if (!std::isnan(s.eval_loss)) {
      if (tty_ && done != steps_) std::fputc('\n', stderr);
      std::fprintf(stderr, "step %d: val loss %.4f\n", done, s.eval_loss);  // nanoGPT's line
    }
    std::fflush(stderr);
  }
  void interrupt() {  // end the in-place line before printing something else
    if (enabled_ && tty_) std::fputc('\n', stderr);
  }

 private:
  int steps_;
  bool enabled_;
  bool tty_;
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int fd = -1;  // read end of its report pipe
  std::string buffer;
  bool exited = false;
  int status = 0;
};

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  return "stopped";
}

// The rank's measured report (rank<N>.json), in the report format's objects.
void write_rank_report(const std::string& dir, const RankResult& r,
                       const std::pair<double, std::string>& matmul) {
  nlohmann::json j{{"class", rank_class_json(r.report)},
                   {"timeline", rank_timeline_json(r.report, r.rank)},
                   {"last_step", step_breakdown_json(r.last_step, r.rank)}};
  if (matmul.first > 0)
    j["matmul_probe"] = {{"flops_per_s", matmul.first}, {"source", matmul.second}};
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/rank" + std::to_string(r.rank) + ".json";
  std::ofstream f(path);
  f << j.dump() << "\n";
  if (!f) throw std::runtime_error("cannot write the rank report " + path);
}

int env_int_or(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? env_int(name) : fallback;
}

// NOTE [Worker rendezvous]: a worker finds its peers through FULLSHARD_STORE_DIR (a directory
// every rank shares: what the local launcher sets, or a shared file system across nodes) or,
// as torchrun's workers do, through MASTER_ADDR/MASTER_PORT: rank 0 hosts a TCP store there
// (backends/gloo/tcp_store.h) and every rank connects to it. The directory wins when both are
// set. Each rank's own Gloo transport address is FULLSHARD_HOSTNAME (default loopback: on
// several nodes set it to an address the other nodes reach).
std::shared_ptr<::gloo::rendezvous::Store> worker_store(int rank, std::chrono::seconds timeout) {
  const std::string dir = env_or("FULLSHARD_STORE_DIR", "");
  if (!dir.empty()) {
    std::filesystem::create_directories(dir);
    return std::make_shared<::gloo::rendezvous::FileStore>(dir);
  }
  const std::string addr = env_or("MASTER_ADDR", "");
  const std::string port_text = env_or("MASTER_PORT", "");
  if (addr.empty() || port_text.empty())
    throw InputError("$FULLSHARD_STORE_DIR", "is not set, nor are MASTER_ADDR and MASTER_PORT",
                     "point every rank at the same (shared) empty directory, or set "
                     "MASTER_ADDR/MASTER_PORT to rank "
                     "0's address and a free port, as torchrun does");
  const int port = env_int("MASTER_PORT");
  if (port < 1 || port > 65535)
    throw InputError("$MASTER_PORT", fmt::format("is {}", port), "use a TCP port in 1-65535");
  gloo_backend::TcpStoreOptions so;
  so.host = addr;
  so.port = port;
  so.is_server = rank == 0;
  so.timeout = timeout;
  try {
    return std::make_shared<gloo_backend::TcpStore>(so);
  } catch (const ::gloo::Exception& e) {
    throw InputError("$MASTER_ADDR:$MASTER_PORT", fmt::format("is {}:{}", addr, port), e.what());
  }
}

}  // namespace

bool is_worker_environment() {
  return std::getenv("RANK") != nullptr && std::getenv("WORLD_SIZE") != nullptr;
}

int worker_main(const LaunchOptions& o, const BackendRegistry& backends) {
  // NOTE [SIGPIPE]: when a peer dies, Gloo's next write to its socket would raise SIGPIPE and
  // kill this worker silently ("killed by signal 13") instead of failing the collective with an
  // error that names it. Ignored, the write fails with EPIPE and Gloo reports the closed peer.
  signal(SIGPIPE, SIG_IGN);
  int rank = -1;
  int fd = -1;
  {
    const char* f = std::getenv("FULLSHARD_REPORT_FD");
    if (f && *f) fd = std::atoi(f);
  }
  try {
    rank = env_int("RANK");
    const int world = env_int("WORLD_SIZE");
    Scenario s = load_run_scenario(o);
    if (world != s.world_size())
      throw InputError(
          "$WORLD_SIZE",
          fmt::format("is {}, but the scenario's mesh has {} ranks", world, s.world_size()),
          "start as many ranks as fsdp.mesh.shape multiplies to");
    if (rank >= world)
      throw InputError("$RANK", fmt::format("is {}, not below WORLD_SIZE {}", rank, world),
                       "use 0..WORLD_SIZE-1");
    const BackendKind& backend_kind = backends.choose(o.backend, s);
    BackendRequest req;
    req.scenario = &s;
    req.env.rank = rank;
    req.env.world_size = world;
    req.env.local_rank = env_int_or("LOCAL_RANK", rank);
    req.env.local_world_size = env_int_or("LOCAL_WORLD_SIZE", world);
    req.env.hostname = env_or("FULLSHARD_HOSTNAME", "127.0.0.1");
    req.env.collectives.timeout = std::chrono::seconds(o.timeout_s);
    req.env.collectives.check_fingerprints = o.check_fingerprints;
    req.batches = batch_source(s);
    req.transport = o.collectives;
    RankOptions ro;
    ro.steps = o.steps;
    ro.checkpoint_dir = o.checkpoint_dir;
    ro.checkpoint_every = o.checkpoint_every;
    ro.checkpoint_keep_last = o.keep_last;
    ro.checkpoint_async = o.checkpoint_mode == "async";
    ro.resume_from = resolve_resume(o.resume, o.checkpoint_dir);
    if (!ro.resume_from.empty()) resume_data_position(ro.resume_from, s, req.batches);
    ro.batches = &req.batches;
    ro.eval_every = o.eval_every;
    ro.eval_batches = o.eval_batches;
    ro.init_from = o.init_from;
    const std::string report_dir = env_or("FULLSHARD_REPORT_DIR", "");
    if (!report_dir.empty()) ro.timeline_points = 4000;
    // FULLSHARD_FAULT=kill:RANK:STEP or stall:RANK:STEP (tests of failure handling).
    if (const char* f = std::getenv("FULLSHARD_FAULT"); f && *f) {
      char kind[16] = {0};
      int fr = -1, fs = -1;
      if (std::sscanf(f, "%15[a-z]:%d:%d", kind, &fr, &fs) != 3 ||
          (std::string(kind) != "kill" && std::string(kind) != "stall"))
        throw InputError("$FULLSHARD_FAULT", std::string("is '") + f + "'",
                         "use kill:RANK:STEP or stall:RANK:STEP");
      if (fr == rank) {
        ro.fault =
            std::string(kind) == "kill" ? RankOptions::Fault::kKill : RankOptions::Fault::kStall;
        ro.fault_step = fs;
      }
    }
    if (world > 1) req.env.store = worker_store(rank, std::chrono::seconds(o.timeout_s));
    req.record_timeline = ro.timeline_points > 0;
    std::pair<double, std::string>
        matmul;  // the measured report's matmul rate, timed before any step
    if (!report_dir.empty() && backend_kind.measure_matmul) matmul = backend_kind.measure_matmul();
    std::unique_ptr<Backend> backend = backend_kind.make(req);
    RankResult r = run_rank(*backend, s, ro, [&](const StepMetrics& m) {
      write_line(fd, {{"type", "step"},
                      {"rank", rank},
                      {"step", m.step},
                      {"loss", loss_json(m.loss)},
                      {"seconds", m.seconds},
                      {"tokens", m.tokens},
                      {"peak_allocated_bytes", m.peak_allocated_bytes},
                      {"peak_reserved_bytes", m.peak_reserved_bytes},
                      {"compute_s", m.compute_s},
                      {"comm_s", m.comm_s},
                      {"exposed_comm_s", m.exposed_comm_s},
                      {"flops", m.flops},
                      {"eval_loss",
                       std::isnan(m.eval_loss) ? nlohmann::json(nullptr) : loss_json(m.eval_loss)},
                      {"ops", rank == 0 ? key_averages_json(m.ops) : nlohmann::json(nullptr)}});
      if (fd < 0 && rank == 0)  // no launcher: rank 0 reports itself
        std::fprintf(stderr, "  step %d: rank 0 loss %.4f, %.2f s, peak allocated %llu B\n",
                     m.step + 1, m.loss, m.seconds,
                     static_cast<unsigned long long>(m.peak_allocated_bytes));
      if (fd < 0 && rank == 0 && !std::isnan(m.eval_loss))
        std::fprintf(stderr, "step %d: rank 0 val loss %.4f\n", m.step + 1, m.eval_loss);
    });
    if (auto* tcp = dynamic_cast<gloo_backend::TcpStore*>(req.env.store.get())) {
      // Rank 0 hosts the store: it stays up until every rank is done with it (a rank may still
      // be connecting a group rank 0 is not in).
      tcp->set("fullshard.done/" + std::to_string(rank), {1});
      if (rank == 0)
        for (int i = 1; i < world; ++i) tcp->wait({"fullshard.done/" + std::to_string(i)});
    }
    nlohmann::json paths = nlohmann::json::object();  // NOTE [Attention path counter]
    for (const auto& [path, calls] : backend->path_counts()) paths[path] = calls;
    backend.reset();
    req.env.store.reset();
    if (!report_dir.empty()) write_rank_report(report_dir, r, matmul);
    write_line(fd, {{"type", "final"},
                    {"rank", rank},
                    {"peak_allocated_bytes", r.report.peak_allocated_bytes},
                    {"peak_reserved_bytes", r.report.peak_reserved_bytes},
                    {"checkpoint", checkpoint_stats_json(r.checkpoint)},
                    {"path_counts", paths}});
    return 0;
  } catch (const InputError& e) {
    if (fd < 0) std::fprintf(stderr, "fullshard: rank %d: error: %s\n", rank, e.what());
    write_line(fd, {{"type", "error"}, {"rank", rank}, {"message", e.what()}, {"input", true}});
    return 2;
  } catch (const std::exception& e) {
    if (fd < 0) std::fprintf(stderr, "fullshard: rank %d: error: %s\n", rank, e.what());
    write_line(fd, {{"type", "error"}, {"rank", rank}, {"message", e.what()}});
    return 1;
  }
}

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
  validate_checkpoint_flags(o.checkpoint_dir, o.checkpoint_every, o.resume,
                            o.steps >= 0 ? o.steps : s.training.steps, s, o.keep_last,
                            o.checkpoint_mode);
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

Scenario load_run_scenario(const LaunchOptions& o) {
  Scenario s = load_scenario_file(o.scenario_path);
  if (!o.data.empty()) {
    s.training.data.path = o.data;
    s.training.data.val_path
        .clear();  // the scenario's validation data belongs to its own training data
  }
  if (!o.data_format.empty()) s.training.data.format = o.data_format;
  return s;
}

LaunchResult launch_local(const LaunchOptions& o, const BackendRegistry& backends) {
  LaunchResult res;
  const auto start = Clock::now();
  Scenario s = load_run_scenario(o);            // bad input fails here, before any process
  if (o.progress && s.training.data.given()) {  // validate_launch checked the data
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
  const int world = s.world_size();
  const int n = world;
  const BackendKind& kind = backends.choose(o.backend, s);
  validate_launch(o, s, kind);
  const std::string resume_folder = resolve_resume(o.resume, o.checkpoint_dir);
  res.backend = kind.name;
  const int steps = o.steps >= 0 ? o.steps : s.training.steps;
  // NOTE [Metrics file]: steps go to PATH.partial as they come (tail it to watch a run); the
  // file takes its name only when the run ends well, so a failed run never replaces an earlier
  // run's metrics, and an input file is never overwritten.
  std::ofstream metrics;
  // An existing --metrics that is not a regular file (/dev/stdout, a FIFO, a device) is written
  // as it is, as OutputFile writes such outputs (NOTE [Atomic outputs]): renaming PATH.partial
  // onto it replaced the node itself (as root, `--metrics /dev/full` left /dev/full a regular
  // file holding the metrics).
  std::error_code metrics_ec;
  const bool metrics_direct = !o.metrics_path.empty() &&
                              std::filesystem::exists(o.metrics_path, metrics_ec) &&
                              !std::filesystem::is_regular_file(o.metrics_path, metrics_ec);
  const std::string metrics_partial = o.metrics_path.empty() ? ""
                                      : metrics_direct       ? o.metrics_path
                                                             : o.metrics_path + ".partial";
  if (!o.metrics_path.empty()) {
    std::error_code ec;
    if (std::filesystem::equivalent(o.metrics_path, o.scenario_path, ec))
      throw InputError("--metrics", "is the scenario file '" + o.metrics_path + "'",
                       "write the metrics to another file");
    if (std::filesystem::is_directory(o.metrics_path, ec))
      throw InputError("--metrics", "'" + o.metrics_path + "' is a directory",
                       "give a file path inside it");
    metrics.open(metrics_partial, metrics_direct ? std::ios::out : std::ios::trunc);
    if (!metrics)
      throw InputError("--metrics", "cannot write '" + metrics_partial + "'",
                       "give a writable file path");
  }
  std::string tmpl_s = (std::filesystem::temp_directory_path() / "fullshard-rdzv-XXXXXX")
                           .string();  // honours $TMPDIR
  char* tmpl = tmpl_s.data();
  if (!mkdtemp(tmpl))
    throw std::runtime_error(std::string("cannot create a rendezvous directory: ") +
                             strerror(errno));
  const std::string store_dir = tmpl;
  const std::string exe =
      o.self_exe.empty() ? std::filesystem::read_symlink("/proc/self/exe").string() : o.self_exe;

  std::vector<Child> children(static_cast<size_t>(n));
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + strerror(errno));
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher
      dup2(p[1], kReportFd);             // dup2 clears close-on-exec
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("FULLSHARD_STORE_DIR", store_dir.c_str(), 1);
      setenv("FULLSHARD_REPORT_FD", std::to_string(kReportFd).c_str(), 1);
      if (kind.name == "cpu")
        setenv("OPENBLAS_NUM_THREADS", "1", 0);  // one BLAS thread per rank unless told otherwise
      if (o.collect_reports) setenv("FULLSHARD_REPORT_DIR", (store_dir + "/reports").c_str(), 1);
      std::vector<std::string> args = {"fullshard",
                                       "train",
                                       o.scenario_path,
                                       "--backend",
                                       kind.name,
                                       "--timeout",
                                       std::to_string(o.timeout_s)};
      if (o.steps >= 0) args.insert(args.end(), {"--steps", std::to_string(o.steps)});
      if (!o.collectives.empty()) args.insert(args.end(), {"--collectives", o.collectives});
      if (o.check_fingerprints) args.push_back("--debug-collectives");
      if (!o.checkpoint_dir.empty())
        args.insert(args.end(),
                    {"--checkpoint-dir", o.checkpoint_dir, "--checkpoint-every",
                     std::to_string(o.checkpoint_every), "--keep-last", std::to_string(o.keep_last),
                     "--checkpoint-mode", o.checkpoint_mode});
      if (!resume_folder.empty())
        args.insert(args.end(), {"--resume", resume_folder});  // resolved once, here
      if (!o.init_from.empty()) args.insert(args.end(), {"--init-from", o.init_from});
      if (!o.data.empty())
        args.insert(args.end(), {"--data", std::filesystem::absolute(o.data).string()});
      if (!o.data_format.empty()) args.insert(args.end(), {"--data-format", o.data_format});
      if (o.eval_every > 0)
        args.insert(args.end(), {"--eval-every", std::to_string(o.eval_every), "--eval-batches",
                                 std::to_string(o.eval_batches)});
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(exe.c_str(), argv.data());
      std::fprintf(stderr, "fullshard: cannot start worker %s: %s\n", exe.c_str(), strerror(errno));
      _exit(127);
    }
    close(p[1]);
    children[r] = Child{r, pid, p[0], {}, false, 0};
  }

  Progress progress(steps, o.progress);
  std::map<int, std::vector<nlohmann::json>> by_step;  // step -> per-rank reports
  res.ranks.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) res.ranks[r].rank = r;
  bool kill_armed = false;
  bool stop_all = false;  // a non-finite loss with --on-nonfinite stop, a metrics write error
  bool metrics_failed = false;
  Clock::time_point kill_at{};
  int alive = n;

  auto handle = [&](const nlohmann::json& j) {
    const std::string type = j.value("type", "");
    const int r = j.value("rank", -1);
    if (r < 0 || r >= n) return;
    if (type == "step") {
      auto& v = by_step[j.value("step", 0)];
      v.push_back(j);
      if (static_cast<int>(v.size()) == n) {
        StepSummary st;
        st.step = j.value("step", 0);
        double loss = 0, tokens = 0, flops = 0;
        int nonfinite_rank = -1;
        double nonfinite_value = 0;
        for (auto& x : v) {
          const double l = loss_of(x);
          if (!std::isfinite(l) && nonfinite_rank < 0) {
            nonfinite_rank = x.value("rank", -1);
            nonfinite_value = l;
          }
          flops += x.value("flops", 0.0);
          st.compute_s = std::max(st.compute_s, x.value("compute_s", 0.0));
          st.exposed_comm_s = std::max(st.exposed_comm_s, x.value("exposed_comm_s", 0.0));
          st.comm_s = std::max(st.comm_s, x.value("comm_s", 0.0));
          loss += l;
          tokens += x.value("tokens", 0.0);
          st.step_time_s = std::max(st.step_time_s, x.value("seconds", 0.0));
          st.peak_allocated_bytes =
              std::max<uint64_t>(st.peak_allocated_bytes, x.value("peak_allocated_bytes", 0ull));
          st.peak_reserved_bytes =
              std::max<uint64_t>(st.peak_reserved_bytes, x.value("peak_reserved_bytes", 0ull));
        }
        st.loss = loss / n;
        if (!v.front().value("eval_loss", nlohmann::json(nullptr)).is_null()) {
          double ev = 0;
          for (auto& x : v) ev += eval_loss_of(x);
          st.eval_loss = ev / n;
        }
        st.tokens_per_s = st.step_time_s > 0 ? tokens / st.step_time_s : 0;
        st.flops_per_s = st.step_time_s > 0 ? flops / st.step_time_s : 0;
        for (auto& x : v)
          if (x.value("rank", -1) == 0 && x.contains("ops") && x["ops"].is_array()) {
            st.ops = key_averages_from_json(x["ops"]);
            if (o.predicted_ops.empty()) break;
            const size_t k =
                std::min(static_cast<size_t>(std::max(st.step, 0)), o.predicted_ops.size() - 1);
            attach_predictions(st.ops, o.predicted_ops[k]);
          }
        res.steps.push_back(st);
        if (metrics.is_open()) {
          nlohmann::json per_rank = nlohmann::json::array();
          for (auto& x : v) {
            const double l = loss_of(x);
            per_rank.push_back(
                {{"rank", x["rank"]}, {"loss", std::isfinite(l) ? nlohmann::json(l) : nullptr}});
          }
          nlohmann::json line{{"step", st.step},
                              {"loss", std::isfinite(st.loss) ? nlohmann::json(st.loss) : nullptr},
                              {"nonfinite", !std::isfinite(st.loss)},
                              {"tokens_per_s", st.tokens_per_s},
                              {"step_time_s", st.step_time_s},
                              {"compute_s", st.compute_s},
                              {"comm_s", st.comm_s},
                              {"exposed_comm_s", st.exposed_comm_s},
                              {"flops_per_s", st.flops_per_s},
                              {"peak_allocated_bytes", st.peak_allocated_bytes},
                              {"peak_reserved_bytes", st.peak_reserved_bytes},
                              {"ranks", per_rank},
                              {"ops", key_averages_json(st.ops)}};
          if (!std::isnan(st.eval_loss))
            line["eval_loss"] =
                std::isfinite(st.eval_loss) ? nlohmann::json(st.eval_loss) : nullptr;
          metrics << line.dump() << "\n";
          metrics.flush();
          if (!metrics && !metrics_failed) {  // a full disk, an I/O error: never a silent half line
            metrics_failed = true;
            res.errors.push_back(
                fmt::format("launcher: writing the metrics to '{}' failed (disk full?); stopped",
                            metrics_partial));
            if (res.exit_code == 0) res.exit_code = 1;
            stop_all = true;
          }
        }
        by_step.erase(st.step);
        progress.step(st, std::chrono::duration<double>(Clock::now() - start).count());
        if (nonfinite_rank >= 0 && res.nonfinite_step < 0) {
          res.nonfinite_step = st.step;
          if (o.on_nonfinite == LaunchOptions::OnNonFinite::kStop) {
            progress.interrupt();
            res.errors.push_back(
                fmt::format("rank {}: the loss is {} at step {}: training diverged; stopped (lower "
                            "training.optimizer.lr, set "
                            "training.optimizer.max_grad_norm, or pass --on-nonfinite continue)",
                            nonfinite_rank, format_loss(nonfinite_value), st.step + 1));
            if (res.exit_code == 0) res.exit_code = 1;
            stop_all = true;
          } else {
            progress.interrupt();
            std::fprintf(
                stderr,
                "fullshard: warning: rank %d: the loss is %s at step %d; going on (--on-nonfinite "
                "continue)\n",
                nonfinite_rank, format_loss(nonfinite_value).c_str(), st.step + 1);
          }
        }
      }
    } else if (type == "final") {
      auto& m = res.ranks[r];
      m.peak_allocated_bytes = j.value("peak_allocated_bytes", 0ull);
      m.peak_reserved_bytes = j.value("peak_reserved_bytes", 0ull);
      if (j.contains("checkpoint")) m.checkpoint = checkpoint_stats_from_json(j["checkpoint"]);
      if (j.contains("path_counts") && j["path_counts"].is_object())
        for (const auto& [path, calls] : j["path_counts"].items())
          m.path_counts.emplace_back(path, calls.get<int64_t>());
    } else if (type == "error") {
      progress.interrupt();
      res.errors.push_back(fmt::format("rank {}: error: {}", r, j.value("message", "")));
      if (j.value("input", false) && res.exit_code == 0) res.exit_code = 2;
    }
  };

  g_interrupted = 0;
  struct sigaction sa {
  }, old_int{}, old_term{};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  bool interrupted = false;
  while (alive > 0) {
    if (g_interrupted && !interrupted) {
      interrupted = true;
      progress.interrupt();
      res.errors.push_back(
          fmt::format("launcher: interrupted by {} after {} complete steps; workers stopped",
                      g_interrupted == SIGINT ? "SIGINT" : "SIGTERM", res.steps.size()));
      res.exit_code = 130;
      for (auto& c : children)
        if (!c.exited) kill(c.pid, SIGKILL);
    }
    std::vector<pollfd> fds;
    for (auto& c : children)
      if (c.fd >= 0) fds.push_back(pollfd{c.fd, POLLIN, 0});
    if (!fds.empty())
      poll(fds.data(), fds.size(), 100);
    else
      usleep(50 * 1000);
    for (auto& c : children) {
      if (c.fd < 0) continue;
      char buf[65536];
      for (;;) {
        pollfd one{c.fd, POLLIN, 0};
        if (poll(&one, 1, 0) <= 0) break;
        ssize_t k = read(c.fd, buf, sizeof buf);
        if (k <= 0) {
          close(c.fd);
          c.fd = -1;
          break;
        }
        c.buffer.append(buf, static_cast<size_t>(k));
        size_t nl;
        while ((nl = c.buffer.find('\n')) != std::string::npos) {
          auto line = c.buffer.substr(0, nl);
          c.buffer.erase(0, nl + 1);
          auto j = nlohmann::json::parse(line, nullptr, false);
          if (!j.is_discarded()) handle(j);
        }
      }
    }
    for (auto& c : children) {
      if (c.exited) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.exited = true;
        c.status = status;
        --alive;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
          if (!kill_armed) {
            kill_armed = true;
            kill_at = Clock::now() + std::chrono::seconds(o.timeout_s + 5);
          }
          if (res.exit_code == 0) res.exit_code = 1;
        }
      }
    }
    if (stop_all) {
      for (auto& c : children)
        if (!c.exited) kill(c.pid, SIGKILL);
      stop_all = false;
    }
    if (kill_armed && Clock::now() > kill_at) {
      for (auto& c : children)
        if (!c.exited) {
          kill(c.pid, SIGKILL);
          res.errors.push_back(
              fmt::format("rank {}: did not stop within the collective timeout; killed", c.rank));
        }
      kill_armed = false;
    }
  }
  for (auto& c : children) {
    if (c.fd >= 0) close(c.fd);
    if (interrupted || metrics_failed ||
        (res.nonfinite_step >= 0 && o.on_nonfinite == LaunchOptions::OnNonFinite::kStop))
      continue;  // stopped on purpose
    if (!(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0)) {
      bool reported = false;
      for (auto& e : res.errors)
        reported = reported || e.rfind(fmt::format("rank {}:", c.rank), 0) == 0;
      if (!reported)
        res.errors.push_back(fmt::format("rank {}: {}", c.rank, describe_exit(c.status)));
    }
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
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  std::error_code ec;
  std::filesystem::remove_all(store_dir, ec);
  if (metrics.is_open()) {
    metrics.close();
    if (metrics_direct) {
      // Nothing to rename: written where it goes (a failed write was reported when it happened).
    } else if (res.exit_code == 0 && !metrics_failed) {
      std::filesystem::rename(metrics_partial, o.metrics_path, ec);
      if (ec) {
        res.errors.push_back(fmt::format("launcher: cannot rename '{}' to '{}': {}",
                                         metrics_partial, o.metrics_path, ec.message()));
        res.exit_code = 1;
      }
    } else {
      res.errors.push_back(
          fmt::format("launcher: the metrics of this run are in '{}'", metrics_partial));
    }
  }
  res.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  return res;
}

}  // namespace fullshard::runner
