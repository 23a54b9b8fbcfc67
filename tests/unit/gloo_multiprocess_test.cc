// Real processes: fork() children that meet through a gloo FileStore in a temporary directory
// and talk over loopback TCP. One run of every collective, and a peer killed mid-collective.
#include <gtest/gtest.h>
#include <gloo/rendezvous/file_store.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/unit/gloo_test_support.h"

using namespace fullshard;
using namespace fullshard::gloo_test;

namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "fullshard-gloo-XXXXXX").string();
    path = mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

// Forks n children; child r runs body(r) and exits with its return value (an exception is
// exit code 99, its message on stderr). Returns each child's exit code (or 128 + signal).
// Children never return into gtest: they flush and _exit.
std::vector<int> run_processes(int n, const std::function<int(int)>& body, double limit_s = 20) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = 99;
      try {
        code = body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(n, -1);
  const auto t0 = Clock::now();
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (codes[r] != -1) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --left;
      }
    }
    if (left > 0 && seconds_since(t0) > limit_s) {
      for (int r = 0; r < n; ++r)
        if (codes[r] == -1) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          codes[r] = 200;  // hung
        }
      break;
    }
    usleep(2000);
  }
  return codes;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(GlooMultiProcess, EveryCollectiveAcrossThreeProcesses) {
  TempDir dir;
  const int n = 3;
  auto codes = run_processes(n, [&](int r) -> int {
    auto store = std::make_shared<::gloo::rendezvous::FileStore>(dir.path);
    ProcessGroupOptions o;
    o.timeout = std::chrono::seconds(10);
    o.check_fingerprints = true;
    GlooProcessGroup pg(store, gloo_backend::make_tcp_device(), world_group(n), r, o);
    int bad = 0;
    // In-place all-gather of bf16.
    const size_t count = 1001;
    std::vector<Bytes> shards(n);
    for (int k = 0; k < n; ++k) shards[k] = random_values(DType::kBFloat16, count, 5 + k);
    Bytes full(n * count * 2);
    std::memcpy(full.data() + r * count * 2, shards[r].data(), count * 2);
    pg.all_gather(full.data() + r * count * 2, full.data(), count, DType::kBFloat16, "ag");
    for (int k = 0; k < n; ++k)
      bad += std::memcmp(full.data() + k * count * 2, shards[k].data(), count * 2) != 0;
    // Reduce-scatter bf16 avg.
    std::vector<Bytes> grads(n);
    for (int k = 0; k < n; ++k) grads[k] = random_values(DType::kBFloat16, n * count, 50 + k);
    Bytes out(count * 2);
    pg.reduce_scatter(grads[r].data(), out.data(), count, DType::kBFloat16, ReduceOp::kAvg, 1,
                      "rs");
    bad += out != expected_reduce_scatter(DType::kBFloat16, ReduceOp::kAvg, 1, grads, count, r);
    // All-reduce fp32 premul-sum.
    std::vector<Bytes> bufs(n);
    for (int k = 0; k < n; ++k) bufs[k] = random_values(DType::kFloat32, 77, 90 + k);
    const Bytes want = expected_all_reduce(DType::kFloat32, ReduceOp::kPremulSum, 0.25, bufs, 77);
    pg.all_reduce(bufs[r].data(), 77, DType::kFloat32, ReduceOp::kPremulSum, 0.25, "ar");
    bad += bufs[r] != want;
    // Broadcast int64 from rank 1, then a barrier.
    std::vector<int64_t> ids(5, r == 1 ? 42 : -1);
    pg.broadcast(ids.data(), 5, DType::kInt64, 1, "bc");
    for (int64_t x : ids) bad += x != 42;
    pg.barrier("end");
    if (bad) std::fprintf(stderr, "child %d: %d wrong results\n", r, bad);
    return bad ? 1 : 0;
  });
  EXPECT_EQ(codes, std::vector<int>(n, 0));
}

// Expert parallelism's token dispatch between real processes: all-to-all-v of bf16 rows with
// uneven split sizes (one of them empty), fingerprints on, then the reverse (the combine).
TEST(GlooMultiProcess, AllToAllVAcrossThreeProcesses) {
  TempDir dir;
  const int n = 3, width = 5;
  auto rows = [](int s, int d) { return static_cast<size_t>((2 * s + d) % 3); };
  auto codes = run_processes(n, [&](int r) -> int {
    auto store = std::make_shared<::gloo::rendezvous::FileStore>(dir.path);
    ProcessGroupOptions o;
    o.timeout = std::chrono::seconds(10);
    o.check_fingerprints = true;
    GlooProcessGroup pg(store, gloo_backend::make_tcp_device(), world_group(n, "ep"), r, o);
    std::vector<size_t> send(n), recv(n);
    std::vector<uint16_t> in;  // bf16 bits: the source rank, the destination, the element
    for (int d = 0; d < n; ++d) {
      send[d] = rows(r, d) * width;
      recv[d] = rows(d, r) * width;
      for (size_t i = 0; i < send[d]; ++i)
        in.push_back(static_cast<uint16_t>(1000 * r + 100 * d + i));
    }
    size_t total = 0;
    for (size_t c : recv) total += c;
    std::vector<uint16_t> out(total, 0xFFFF), back(in.size(), 0xFFFF);
    pg.all_to_all(in.data(), send, out.data(), recv, DType::kBFloat16, "dispatch");
    int bad = 0;
    size_t k = 0;
    for (int s = 0; s < n; ++s)
      for (size_t i = 0; i < recv[s]; ++i) bad += out[k++] != 1000 * s + 100 * r + i;
    pg.all_to_all(out.data(), recv, back.data(), send, DType::kBFloat16, "combine");
    bad += back != in;
    if (bad) std::fprintf(stderr, "child %d: %d wrong elements\n", r, bad);
    return bad ? 1 : 0;
  });
  EXPECT_EQ(codes, std::vector<int>(n, 0));
}

TEST(GlooMultiProcess, PeerKilledMidCollective) {
  TempDir dir;
  const int n = 3;
  const double timeout_s = 10;
  auto codes = run_processes(n, [&](int r) -> int {
    auto store = std::make_shared<::gloo::rendezvous::FileStore>(dir.path);
    ProcessGroupOptions o;
    o.timeout = std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
    GlooProcessGroup pg(store, gloo_backend::make_tcp_device(), world_group(n, "shard"), r, o);
    pg.barrier("connected");
    if (r == 2) {
      // Let the others enter the all-reduce and block on us, then die without a word.
      usleep(300 * 1000);
      raise(SIGKILL);
    }
    std::vector<float> v(1 << 16, 1.0f);
    const auto t0 = Clock::now();
    std::string message;
    try {
      pg.all_reduce(v.data(), v.size(), DType::kFloat32, ReduceOp::kSum, 1, "grad_norm");
      message = "no error";
    } catch (const CollectiveError& e) {
      message = e.what();
    }
    std::ofstream(dir.path + "/child" + std::to_string(r) + ".txt") << seconds_since(t0) << "\n"
                                                                    << message << "\n";
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 128 + SIGKILL}));
  for (int r = 0; r < 2; ++r) {
    std::istringstream in(slurp(dir.path + "/child" + std::to_string(r) + ".txt"));
    double elapsed = 1e9;
    std::string message;
    in >> elapsed;
    in.ignore();
    std::getline(in, message);
    std::printf("rank %d after %.3f s: %s\n", r, elapsed, message.c_str());
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + message);
    EXPECT_NE(message.find("gloo: rank " + std::to_string(r)), std::string::npos);
    EXPECT_NE(message.find("all_reduce 'grad_norm' (65536 x fp32, sum) failed"), std::string::npos);
    EXPECT_NE(message.find("was closed"), std::string::npos);
    // Found by the closed connection, well before the timeout.
    EXPECT_LT(elapsed, timeout_s / 2);
  }
  // Rank 0 receives from rank 2 in the ring and sees its connection close.
  const std::string m0 = slurp(dir.path + "/child0.txt");
  EXPECT_NE(m0.find("the connection to rank 2 was closed"), std::string::npos) << m0;
}

}  // namespace
