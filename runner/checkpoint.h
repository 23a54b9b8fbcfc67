#pragma once
// Saving and resuming a sharded checkpoint inside a real rank (docs/checkpoints.md): each
// rank writes only the pieces it holds (parameters and AdamW states; rank 0 also the persistent
// buffers, whole: NOTE [Persistent buffers in checkpoints]) and reads back only the rows it
// needs, on any world size or mesh (NOTE [Checkpoint commit], NOTE [Reshard on load]).
#include <cstdint>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_metadata.h"

#include "core/data/text_corpus.h"
#include "core/runtime/backend.h"
#include "core/train/training_program.h"

namespace fullshard::runner {

// Saving is runner/checkpoint_saver.h (CheckpointSaver: synchronous or asynchronous).

// A tensor of this rank that a checkpoint holds: its name in the checkpoint and where it lives.
struct LocalCheckpointTensor {
  std::string name;
  Shape global_shape;
  TensorRef local;               // the unpadded local shard (a buffer: the whole tensor)
  const Param* param = nullptr;  // its parameter (placements: RankPieces::layout_of)
  // Or the persistent buffer it is, whole on every rank and saved by rank 0 only (NOTE
  // [Persistent buffers in checkpoints] in core/checkpoint/checkpoint_metadata.h); param null.
  const ModuleBuffer* buffer = nullptr;
};
// Every parameter, then the optimizer states once they exist, in FSDP order, then the model's
// persistent buffers in module order.
std::vector<LocalCheckpointTensor> local_checkpoint_tensors(TrainingProgram& prog);

// The metadata.json of the save of `s` after `steps_done` steps, as rank 0 writes it
// (`tensors`: rank 0's; `data`: the data source whose position is saved, or null).
CheckpointMetadata checkpoint_metadata(Backend& b, TrainingProgram& prog, const Scenario& s,
                                       int64_t steps_done,
                                       const std::vector<LocalCheckpointTensor>& tensors,
                                       const BatchSource* data);

// All ranks of the job meet here (the host blocks until they have).
void world_barrier(Backend& b, const std::string& name);

// Global sequences one optimizer step of `s` reads (every rank's batch x grad_accum_steps).
int64_t samples_per_step(const Scenario& s);

// Before resuming from `folder`: moves `data` (a token data set read in order) to the data
// position the checkpoint saved, so that the resumed run reads the sequences the interrupted
// run would have read next, even with another global batch. A checkpoint without a saved data
// position (the generated corpus) continues at its next step's position.
void resume_data_position(const std::string& folder, const Scenario& s, BatchSource& data);

// Loads the committed checkpoint `folder` into this rank's parameters and optimizer state
// and returns the step to continue at: every rank reads each saved persistent buffer whole (a
// checkpoint without buffers leaves them at zero). Throws InputError (where "--resume") naming
// the first tensor whose name, dtype or shape does not match the scenario's model, or a seed
// mismatch.
int64_t load_checkpoint(Backend& b, TrainingProgram& prog, const Scenario& s,
                        const std::string& folder);

// The checkpoint folder a `--resume` value names: "" (none) -> "", "latest" -> the highest
// committed step under `checkpoint_dir`, else a folder (a step folder or a checkpoint root).
// Throws InputError naming --resume.
std::string resolve_resume(const std::string& resume, const std::string& checkpoint_dir);

// Checks the checkpoint flags of `fullshard train` before any worker starts: --checkpoint-every
// >= 0 and given with --checkpoint-dir (created here when saving, must be writable), a checkpoint
// to resume whose next step is below `steps`, of
// `s`'s seed, whose parameters have the names and global shapes of `s`'s model and whose
// buffers are persistent buffers of it (the first mismatching tensor is named).
// --keep-last must be >= 0 and needs --checkpoint-every. (--checkpoint-mode is parsed by the
// CLI: parse_checkpoint_save_mode, core/scenario/checkpoint_save_mode.h.)
void validate_checkpoint_flags(const std::string& checkpoint_dir, int checkpoint_every,
                               const std::string& resume, int steps, const Scenario& s,
                               int keep_last = 0);

}  // namespace fullshard::runner
