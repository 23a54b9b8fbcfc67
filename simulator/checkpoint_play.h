#pragma once
// Records a rank's checkpoint saves into its simulated host program, so that the engine plays
// them (training.checkpoint; the closed form of the same cost is checkpoint_cost.h).
//
// NOTE [Playing a checkpoint save]: after the optimizer step of every step that saves
// ((step + 1) % every == 0, as runner/checkpoint_saver.cc saves after every N steps), each
// rank that writes (replica 0, as checkpoint_shard_bytes) issues what DCP does for a FSDP2
// model:
//   1. "checkpoint save" marker; async: the host first waits for the previous save's write
//      (DCP's caller waits on async_save's future) and frees that save's staging;
//   2. the device_to_host stream waits for the optimizer (an event on the compute stream) and
//      copies every unpadded local shard (the parameter, exp_avg, exp_avg_sq) into pageable
//      host memory (KernelPlace::kDeviceToPageableHost: DCP's ordinary CPU tensors, at the
//      profile's pageable_copy_bandwidth whatever fsdp.cpu_offload.pin_memory says); async
//      allocates the staging buffers in host memory first (Backend::allocate_host: they are in
//      the host accounts and the timeline's host bytes until freed); sync stages nothing (DCP's
//      synchronous writer copies a tensor at a time as it writes);
//   3. the host synchronizes on the copies (DCP's .cpu() blocks), then hands the write to its
//      writer thread: a kStorageWrite of the rank's bytes on the rank's checkpoint lane, lasting
//      its node's bytes / storage_write_bandwidth (the node's writers share the storage and,
//      writing at once, end together);
//   4. sync: the host synchronizes on the write (the next step starts after it); async: it goes
//      on at once; "checkpoint end" marker.
// At the end of the recorded steps an async write still in flight is waited for and its
// staging freed (the run's end waits for the last save). No device memory is allocated: the
// device predictions are those without checkpoints. When no save falls in the played steps
// (every > the steps played before extrapolating), one save is played after the last played
// step, standing for the run's saves. Ranks that do not write issue nothing; the collectives
// of the next step make them wait for the writers, as DCP's barriers would.
// What is not played: the commit (metadata, fsyncs, the barriers' latency), the file system's
// latency, and contention of the write with training for host memory bandwidth.
#include <cstdint>
#include <vector>

#include "core/model/tensor.h"
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
  bool async_ = false;
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

}  // namespace fullshard::sim
