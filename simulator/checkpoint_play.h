#pragma once
// Records a rank's checkpoint saves into its simulated host program, so that the engine plays
// them (training.checkpoint; the closed form of the same cost is checkpoint_cost.h).
//
// NOTE [Playing a checkpoint save]: after the optimizer step of every step that saves ((step + 1) %
// every == 0, as runner/checkpoint_saver.cc), each rank that writes (replica 0) issues what DCP
// does for a FSDP2 model: the device_to_host stream waits for the optimizer and copies every
// unpadded local shard (parameter, exp_avg, exp_avg_sq; on global rank 0 also every persistent
// buffer, whole: NOTE [Persistent buffers in checkpoints] in core/checkpoint/checkpoint_metadata.h)
// to pageable host memory (async: into
// staging allocated with Backend::allocate_host); the host synchronizes on the copies and hands a
// kStorageWrite of the rank's bytes to its checkpoint lane (its node's bytes /
// storage_write_bandwidth); sync waits for the write, async goes on and the next save (or the run's
// end) waits for it and frees its staging. No device memory is allocated. With no save in the
// played steps one is played after the last, standing for the run's saves. Ranks that do not write
// issue nothing: the next step's collectives make them wait, as DCP's barriers would. Each step in
// full: docs/cost-model.md, "A played save, step by step".
#include <cstdint>
#include <vector>

#include "core/runtime/backend_storage.h"
#include "core/scenario/scenario.h"
#include "core/train/training_program.h"
#include "simulator/sim_backend.h"

namespace fullshard::sim {

class CheckpointPlayer {
 public:
  // `run_steps`: the whole run's training.steps (the played steps may be fewer).
  CheckpointPlayer(SimBackend& backend, TrainingProgram& program, const Scenario& s, int run_steps);

  // After run_step(step): saves when the schedule says so, or (`last_played`) when no save
  // was played yet and the run has one.
  void after_step(int step, bool last_played);
  // After the last recorded step: waits for an async write still in flight.
  void finish();

  int saves() const { return saves_; }
  uint64_t bytes() const { return bytes_; }

 private:
  SimBackend& b_;
  TrainingProgram& prog_;
  int every_ = 0;
  CheckpointSaveMode mode_ = CheckpointSaveMode::kSync;
  int run_saves_ = 0;
  uint64_t bytes_ = 0;       // this rank's bytes per save (0: it does not write)
  uint64_t node_bytes_ = 0;  // its node's bytes per save
  int saves_ = 0;
  EventId write_done_ = 0;       // the last write's event (async: not waited for yet)
  std::vector<Tensor> staging_;  // async: the last save's host staging

  void save();
};

// Whether `rank` writes checkpoint files (replica 0 of HSDP; every rank otherwise).
bool writes_checkpoint(const Scenario& s, int rank);
// Whether `s`'s model has persistent buffers, which global rank 0 alone saves (NOTE [Persistent
// buffers in checkpoints] in core/checkpoint/checkpoint_metadata.h): its save differs from its
// shard peers'.
bool saves_buffers(const Scenario& s);

}  // namespace fullshard::sim
