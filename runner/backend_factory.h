#pragma once
// How a worker gets its Backend: the binary registers one factory per real backend ("cpu",
// "cuda"); the launcher and the worker pick one by name (`--backend`), or from the scenario's
// hardware profile when none is given (NOTE [Default backend]).
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "backends/gloo/process_group.h"
#include "core/data/text_corpus.h"
#include "core/runtime/backend.h"
#include "core/scenario/scenario.h"

namespace gloo::rendezvous {
class Store;
}

namespace fullshard::runner {

// Where a rank runs: torchrun's environment plus the rendezvous store every rank shares.
struct RankEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // LOCAL_RANK: the device of this rank on its machine
  int local_world_size = 1;  // LOCAL_WORLD_SIZE: ranks on this machine
  std::shared_ptr<::gloo::rendezvous::Store> store;  // null for one rank
  std::string hostname = "127.0.0.1";                // this rank's address for TCP transports
  gloo_backend::ProcessGroupOptions collectives;     // timeout, fingerprints
};

struct BackendRequest {
  const Scenario* scenario = nullptr;
  RankEnvironment env;
  BatchSource batches;           // kLoadBatch's data
  bool record_timeline = false;  // keep the allocator's timeline (measured reports)
  std::string transport;         // --collectives: "" (the backend's choice), "nccl" or "gloo"
};

using BackendFactory = std::function<std::unique_ptr<Backend>(const BackendRequest&)>;

struct BackendKind {
  std::string name;         // "cpu", "cuda"
  std::string description;  // one line for --help and errors
  BackendFactory make;
  // Devices this machine offers (GPUs; 0 when none); -1: not device-bound (CPU processes).
  std::function<int()> device_count;
  // Optional: times the backend's matmul (CPU: OpenBLAS sgemm) for a measured report's MFU:
  // {FLOP/s, what was timed}. Workers call it at start-up when reports are collected.
  std::function<std::pair<double, std::string>()> measure_matmul;
};

class BackendRegistry {
 public:
  void add(BackendKind kind);
  const BackendKind* find(const std::string& name) const;
  // `requested` (--backend) when given, else the default for the scenario (NOTE [Default
  // backend]). Throws InputError naming --backend with the fix.
  const BackendKind& choose(const std::string& requested, const Scenario& s) const;
  std::string names() const;  // "cpu|cuda"

 private:
  std::map<std::string, BackendKind> kinds_;
};

// kLoadBatch's data for `s`: `corpus`, else training.data (NOTE [Token data sampling]), else
// the generated corpus. Throws InputError when a sequence does not fit in the data, a token is
// not below model.vocab_size or a data file is missing or malformed.
BatchSource batch_source(const Scenario& s, std::shared_ptr<const TextCorpus> corpus = nullptr);
// A data path of `s` (training.data's path or val_path) opened and checked against the model
// as batch_source() does; errors name `where`.
std::shared_ptr<const TokenSource> open_data(const Scenario& s, const std::string& path,
                                             const std::string& where);

// True when the scenario's hardware profile describes CPU processes (profile "cpu").
bool is_cpu_scenario(const Scenario& s);

}  // namespace fullshard::runner
