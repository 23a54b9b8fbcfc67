#include "runner/worker_processes.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

extern char** environ;

namespace fullshard::runner {
namespace {

using Clock = std::chrono::steady_clock;

// NOTE [Interrupted launcher]: SIGINT / SIGTERM only set a flag; the launcher's loop then kills
// the workers, removes the rendezvous directory, keeps the metrics under their .partial name
// and says what was done, instead of dying with everything left behind.
volatile std::sig_atomic_t g_interrupted = 0;
void on_interrupt(int sig) { g_interrupted = sig; }

// Installs on_interrupt for SIGINT and SIGTERM for its lifetime.
class InterruptHandlers {
 public:
  InterruptHandlers() {
    g_interrupted = 0;
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~InterruptHandlers() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

// The launcher's environment with `c`'s variables applied, as execve takes it (built before
// fork: the child only execs).
std::vector<std::string> worker_environment(const WorkerCommand& c) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  auto find = [&](const std::string& name) {
    for (size_t i = 0; i < env.size(); ++i)
      if (env[i].compare(0, name.size() + 1, name + "=") == 0) return static_cast<int>(i);
    return -1;
  };
  for (const auto& [name, value] : c.env) {
    const int i = find(name);
    if (i >= 0)
      env[i] = name + "=" + value;
    else
      env.push_back(name + "=" + value);
  }
  // As setenv(name, value, 0): a variable that is set, even empty, stays.
  for (const auto& [name, value] : c.env_defaults)
    if (find(name) < 0) env.push_back(name + "=" + value);
  return env;
}

}  // namespace

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  return "stopped";
}

WorkerProcesses::WorkerProcesses(const std::vector<WorkerCommand>& commands, int report_fd) {
  workers_.reserve(commands.size());
  std::fflush(nullptr);
  for (const WorkerCommand& c : commands) {
    std::vector<std::string> args = c.argv, env = worker_environment(c);
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + strerror(errno));
    const pid_t pid = fork();
    if (pid < 0) {
      close(p[0]);
      close(p[1]);
      throw std::runtime_error(std::string("fork: ") + strerror(errno));
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher
      dup2(p[1], report_fd);             // dup2 clears close-on-exec
      execve(c.exe.c_str(), argv.data(), envp.data());
      std::fprintf(stderr, "fullshard: cannot start worker %s: %s\n", c.exe.c_str(),
                   strerror(errno));
      _exit(127);
    }
    close(p[1]);
    Worker w;
    w.pid = pid;
    w.fd = p[0];
    workers_.push_back(std::move(w));
  }
}

WorkerProcesses::~WorkerProcesses() {
  kill_running();
  for (Worker& w : workers_) {
    if (!w.exited) waitpid(w.pid, &w.status, 0);
    if (w.fd >= 0) close(w.fd);
  }
}

void WorkerProcesses::kill_running() {
  for (Worker& w : workers_)
    if (!w.exited) kill(w.pid, SIGKILL);
}

std::vector<int> WorkerProcesses::wait_statuses() const {
  std::vector<int> out;
  for (const Worker& w : workers_) out.push_back(w.status);
  return out;
}

void WorkerProcesses::run(const WorkerEvents& events, std::chrono::seconds failure_grace) {
  const InterruptHandlers handlers;
  bool interrupted = false;
  bool kill_armed = false;
  Clock::time_point kill_at{};
  int alive = 0;
  for (const Worker& w : workers_) alive += w.exited ? 0 : 1;
  const int n = size();
  while (alive > 0) {
    if (g_interrupted && !interrupted) {
      interrupted = true;
      if (events.interrupted) events.interrupted(g_interrupted);
      kill_running();
    }
    std::vector<pollfd> fds;
    for (const Worker& w : workers_)
      if (w.fd >= 0) fds.push_back(pollfd{w.fd, POLLIN, 0});
    if (!fds.empty())
      poll(fds.data(), fds.size(), 100);
    else
      usleep(50 * 1000);
    for (int r = 0; r < n; ++r) {
      Worker& w = workers_[r];
      if (w.fd < 0) continue;
      char buf[65536];
      for (;;) {
        pollfd one{w.fd, POLLIN, 0};
        if (poll(&one, 1, 0) <= 0) break;
        const ssize_t k = read(w.fd, buf, sizeof buf);
        if (k <= 0) {
          close(w.fd);
          w.fd = -1;
          break;
        }
        w.buffer.append(buf, static_cast<size_t>(k));
        size_t nl;
        while ((nl = w.buffer.find('\n')) != std::string::npos) {
          const std::string line = w.buffer.substr(0, nl);
          w.buffer.erase(0, nl + 1);
          if (events.line) events.line(r, line);
        }
      }
    }
    for (int r = 0; r < n; ++r) {
      Worker& w = workers_[r];
      if (w.exited) continue;
      int status = 0;
      if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.exited = true;
        w.status = status;
        --alive;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
          if (!kill_armed) {
            kill_armed = true;
            kill_at = Clock::now() + failure_grace;
          }
          if (events.failed) events.failed(r, status);
        }
      }
    }
    if (stop_) {
      kill_running();
      stop_ = false;
    }
    if (kill_armed && Clock::now() > kill_at) {
      for (int r = 0; r < n; ++r)
        if (!workers_[r].exited) {
          kill(workers_[r].pid, SIGKILL);
          if (events.killed_after_grace) events.killed_after_grace(r);
        }
      kill_armed = false;
    }
  }
  for (Worker& w : workers_)
    if (w.fd >= 0) {
      close(w.fd);
      w.fd = -1;
    }
}

}  // namespace fullshard::runner
