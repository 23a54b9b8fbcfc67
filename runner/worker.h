#pragma once
// The worker side of `fullshard train`: one rank, started by the local launcher
// (runner/launcher.h) or by any torchrun-style launcher (torchrun-like scripts, Slurm, mpirun)
// through environment variables, reporting to the launcher on a pipe.
#include "runner/backend_factory.h"
#include "runner/launch_options.h"

namespace fullshard::runner {

// NOTE [Worker options]: the local launcher hands each worker the run's options as one JSON
// object (launch_options_json) in this variable, with the backend it chose, --resume resolved to
// a checkpoint folder and --data made absolute; the worker's own flags then only name the
// scenario (for ps). A worker started by hand, without the variable, takes its flags.
inline constexpr const char* kWorkerOptionsVariable = "FULLSHARD_WORKER_OPTIONS";

// True when the environment says this process is a worker (RANK and WORLD_SIZE set).
bool is_worker_environment();
// Worker entry: RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE (default RANK and
// WORLD_SIZE: one machine), FULLSHARD_STORE_DIR (a directory all ranks share), optional
// FULLSHARD_HOSTNAME (this rank's address, default 127.0.0.1), FULLSHARD_REPORT_FD (the
// launcher's pipe) and FULLSHARD_WORKER_OPTIONS (else `flags`). Returns the exit code.
int worker_main(const LaunchOptions& flags, const BackendRegistry& backends);

}  // namespace fullshard::runner
