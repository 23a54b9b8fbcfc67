#include "runner/worker.h"

#include <signal.h>

#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <gloo/common/error.h>
#include <nlohmann/json.hpp>

#include "backends/gloo/rendezvous.h"
#include "backends/gloo/tcp_store.h"
#include "core/common/error.h"
#include "runner/checkpoint.h"
#include "runner/launch_options.h"
#include "runner/measured_rank.h"
#include "runner/rank_runner.h"
#include "runner/step_metrics.h"

namespace fullshard::runner {
namespace {

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

// NOTE [Worker messages]: a worker reports on its pipe (FULLSHARD_REPORT_FD) one JSON object
// per line, each with "type" and "rank": "step" after every step (step_metrics_json; rank 0's
// alone carries the per-op table), "final" at the end (measured_rank_json), or "error" with
// "message" (and "input": true for bad input, exit 2). The launcher combines the steps
// (runner/step_aggregation.h); without a launcher (fd unset) nothing is written.
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
    return gloo_backend::make_file_store(dir);  // NOTE [FileStore across threads]
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

namespace {

// The options this worker runs with (NOTE [Worker options]).
LaunchOptions launch_options_of_worker(const LaunchOptions& from_flags) {
  const char* text = std::getenv(kWorkerOptionsVariable);
  if (!text || !*text) return from_flags;
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded())
    throw InputError(std::string("$") + kWorkerOptionsVariable, "is not JSON",
                     "unset it: the local launcher sets it for its workers");
  return launch_options_from_json(j, std::string("$") + kWorkerOptionsVariable);
}

}  // namespace

int worker_main(const LaunchOptions& flags, const BackendRegistry& backends) {
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
    const LaunchOptions o = launch_options_of_worker(flags);
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
    ro.checkpoint_mode = o.checkpoint_mode;
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
      nlohmann::json line{{"type", "step"}, {"rank", rank}};
      line.update(step_metrics_json(m, /*with_ops=*/rank == 0));  // rank 0's table alone
      write_line(fd, line);
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
    MeasuredRank final_rank;
    final_rank.rank = rank;
    final_rank.peak_allocated_bytes = r.report.peak_allocated_bytes;
    final_rank.peak_reserved_bytes = r.report.peak_reserved_bytes;
    final_rank.init_peak_allocated_bytes = r.report.init_peak_allocated_bytes;
    final_rank.init_peak_reserved_bytes = r.report.init_peak_reserved_bytes;
    final_rank.checkpoint = r.checkpoint;
    final_rank.path_counts = backend->path_counts();  // NOTE [Attention path counter]
    backend.reset();
    req.env.store.reset();
    if (!report_dir.empty()) write_rank_report(report_dir, r, matmul);
    nlohmann::json line{{"type", "final"}, {"rank", rank}};
    line.update(measured_rank_json(final_rank));
    write_line(fd, line);
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

}  // namespace fullshard::runner
