#pragma once
// Process supervision for the local launcher: starts the worker processes, reads the lines each
// writes on its report pipe, reaps them, and kills them (a launcher interrupted by SIGINT or
// SIGTERM, a failed worker's peers after a grace period, or on request). Knows nothing of
// training: what the lines mean is the caller's (runner/launcher.cc).
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fullshard::runner {

// One worker: the binary, its argv (argv[0] included), and what it adds to the launcher's
// environment (`env` overrides, `env_defaults` only where the variable is unset).
struct WorkerCommand {
  std::string exe;
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::pair<std::string, std::string>> env_defaults;
};

// What the supervisor tells its caller, in the order it happens. Each may be empty.
struct WorkerEvents {
  std::function<void(int rank, const std::string& line)> line;  // a whole line, without '\n'
  // SIGINT or SIGTERM reached the launcher (once); every worker is killed right after.
  std::function<void(int signal)> interrupted;
  // A worker exited with a non-zero code or was killed (once per worker).
  std::function<void(int rank, int wait_status)> failed;
  // A worker still ran `failure_grace` after another one failed, and was killed.
  std::function<void(int rank)> killed_after_grace;
};

// "exited with code 3", "was killed by signal 9 (Killed)".
std::string describe_exit(int wait_status);

class WorkerProcesses {
 public:
  // Forks and execs one worker per command, rank i running commands[i]. Each worker's report
  // pipe is its file descriptor `report_fd`; each dies with the launcher (PR_SET_PDEATHSIG).
  WorkerProcesses(const std::vector<WorkerCommand>& commands, int report_fd);
  // Kills and reaps the workers still running (run() left by an exception).
  ~WorkerProcesses();
  WorkerProcesses(const WorkerProcesses&) = delete;
  WorkerProcesses& operator=(const WorkerProcesses&) = delete;

  // Supervises until every worker has exited: passes their lines to `events`, kills them all on
  // SIGINT/SIGTERM (NOTE [Interrupted launcher]) or after stop(), and kills the survivors
  // `failure_grace` after the first worker failed. Restores the signal handlers it installs.
  void run(const WorkerEvents& events, std::chrono::seconds failure_grace);
  // Kill every worker at the next turn of run() (callable from an event).
  void stop() { stop_ = true; }
  // Each worker's wait status, by rank (after run()).
  std::vector<int> wait_statuses() const;
  int size() const { return static_cast<int>(workers_.size()); }

 private:
  struct Worker {
    pid_t pid = -1;
    int fd = -1;  // read end of its report pipe (-1: closed)
    std::string buffer;
    bool exited = false;
    int status = 0;
  };
  void kill_running();
  std::vector<Worker> workers_;
  bool stop_ = false;
};

}  // namespace fullshard::runner
