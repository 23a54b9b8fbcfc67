#pragma once
// Saving sharded checkpoints inside a real rank, synchronously or asynchronously
// (docs/checkpoints.md), with a retention policy (NOTE [Checkpoint retention]).
//
// NOTE [Asynchronous save]: as torch.distributed.checkpoint.async_save (torchtitan's
// checkpoint.async_mode = "async"), a save is split in two. On the training thread, every
// rank copies the shards it writes (parameters, AdamW states; rank 0 also the persistent
// buffers) to a host staging buffer (Backend::copy_to_host) and rank 0 fixes the metadata
// (step, seed, data position) at that moment; training then goes on, and a background thread writes
// the rank's file (temporary name, fsync, rename). Rank 0's thread waits until every shard file of
// the step is in place (a file appears only after its rename, so presence means complete), then
// commits metadata.json and applies --keep-last. The background threads never touch the backend or
// its process groups, so they cannot interleave with training's collectives (DCP uses a separate
// Gloo group for the same reason). The next save first waits for the previous one, as DCP's
// caller waits on the future of async_save; so does the end of the run. An error of the
// background write is raised there. Staging buffers are host memory, counted in
// CheckpointSaveStats::staging_bytes, never in the device allocator's accounts; they are freed
// when the write finishes. Because every rank writes into one folder and rank 0 watches it for
// the others' files, --checkpoint-dir must be a shared file system across machines (as for
// the synchronous save and DCP's FileSystemWriter).
#include <atomic>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/data/text_corpus.h"
#include "core/runtime/backend.h"
#include "core/scenario/checkpoint_save_mode.h"
#include "core/train/training_program.h"

namespace fullshard::runner {

struct CheckpointSaveOptions {
  std::string root;   // --checkpoint-dir
  int keep_last = 0;  // --keep-last: committed checkpoints kept (0: all)
  CheckpointSaveMode mode = CheckpointSaveMode::kSync;  // --checkpoint-mode
};

// What the saves of one rank cost (the run's summary and measured report).
struct CheckpointSaveStats {
  int saves = 0;
  CheckpointSaveMode mode = CheckpointSaveMode::kSync;
  uint64_t staging_bytes = 0;  // largest host staging buffer of one save (async only)
  double exposed_s =
      0;  // training-thread time spent in saves (staging, barriers, waiting for the previous save)
  double background_s = 0;  // background threads' time writing and committing (async only)
  double hidden_s =
      0;  // background time that overlapped training: background_s minus the waits for it
};
nlohmann::json checkpoint_stats_json(const CheckpointSaveStats& s);
CheckpointSaveStats checkpoint_stats_from_json(const nlohmann::json& j);

class CheckpointSaver {
 public:
  CheckpointSaver(Backend& b, const Scenario& s, CheckpointSaveOptions o);
  // Waits for a save in flight (its errors are dropped: the run is failing or done).
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Every rank, after `steps_done` optimizer steps: saves `root`/step-N (collective: every rank
  // calls it at the same step). Synchronous: returns once the save is committed. Async: waits
  // for the previous save, stages, and returns while the write goes on. `data`: the rank's
  // data source; with token data its position is saved (NOTE [Token data sampling]).
  void save(TrainingProgram& prog, int64_t steps_done, const BatchSource* data);
  // Waits for the save in flight (async) and rethrows its error. Every rank at the end of a run.
  void finish();
  const CheckpointSaveStats& stats() const { return stats_; }

 private:
  void wait_previous();
  Backend& b_;
  const Scenario& s_;
  CheckpointSaveOptions o_;
  CheckpointSaveStats stats_;
  std::thread worker_;
  std::exception_ptr error_;
  double worker_s_ = 0;  // the worker's own time (written by it, read after join)
  std::atomic<bool> cancel_{false};
};

}  // namespace fullshard::runner
