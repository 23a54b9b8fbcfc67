#pragma once
// The metadata file of a sharded checkpoint (metadata.json, docs/checkpoints.md): what DCP's
// .metadata holds, as JSON: every tensor's global shape and dtype and which file holds which
// rows, plus the training state that is not a tensor (step, data position, RNG seeds).
//
// NOTE [Checkpoint state that is not a tensor]: a fullshard step is a pure function of the
// parameters, the optimizer state, the step index and the scenario's seed: kLoadBatch samples
// global sample i of step s from (seed, s, i) (core/data/text_corpus.h) and kInitParam draws
// from (seed, parameter name). So the data position is the next step index and the only RNG
// state is the seed; both are saved, and a resume with a different seed is refused. With a
// token data set (training.data) the position is also saved as "data" (global samples read,
// epoch, window in the epoch: NOTE [Token data sampling]), and a resume continues there.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint/piece_layout.h"
#include "core/checkpoint/reshard.h"

namespace fullshard {

// Version 2: chunks are boxes {offsets, lengths} (NOTE [Pieces as boxes]), the mesh has "tp"
// and tensors their "placements". Version 1 (chunks {row_begin, rows}) is still read.
inline constexpr int kCheckpointFormatVersion = 2;

struct CheckpointChunk {
  std::string file;  // rank file name inside the step folder
  ChunkBox box;      // its slice of the global tensor; the stored tensor's shape is box.lengths
};

struct CheckpointTensor {
  // "param/<fqn>", "exp_avg/<fqn>", "exp_avg_sq/<fqn>", "buffer/<fqn>" (NOTE [Persistent
  // buffers in checkpoints]): also its key in the files.
  std::string name;
  std::string dtype;  // safetensors name ("F32")
  Shape shape;        // global
  std::vector<std::string>
      placements;  // DTensor's over the saving mesh (informational; dtensor_placements)
  std::vector<CheckpointChunk> chunks;  // tiling the tensor (validate_boxes)
};

struct CheckpointFile {
  std::string name;
  uint64_t bytes = 0;  // size when it was written: a different size is a damaged file
};

// Where a token data set was when the checkpoint was saved (optional "data" object).
struct CheckpointDataPosition {
  std::string source;   // the data path as the scenario gave it (informational)
  int64_t samples = 0;  // global sequences read: the next step's first global sample
  int64_t epoch = 0;
  int64_t window = 0;  // the next sequence's index within the epoch
};

// The AdamW hyperparameters of the run (optional "adamw" object): what `export --dcp` writes as
// the optimizer's param_groups (NOTE [AdamW state in DCP], core/checkpoint/dcp_optim.h).
struct CheckpointAdamW {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
};

struct CheckpointMetadata {
  int version = kCheckpointFormatVersion;
  std::string scenario;        // the scenario's name (informational)
  std::string arch = "llama";  // hf_arch of the model (export names): llama, gpt2, mixtral, ...
  int64_t step = 0;            // optimizer steps completed
  int64_t next_step = 0;       // data position: the step index the resumed run starts at
  uint64_t seed = 0;           // NOTE [Checkpoint state that is not a tensor]
  int world_size = 1;
  int replicate = 1, shard = 1;  // mesh: replicate x shard (HSDP); FSDP is replicate 1
  int tp = 1;                    // the tp dim: world_size = replicate x shard x tp
  int ep = 1;  // expert parallelism within the shard dim (efsdp x ep = shard); 1: none
  // The model's RoPE pairs q / k columns otherwise than its Hugging Face files (NOTE [Rotary
  // pairing of weight files] in core/checkpoint/hf_names.h): export under HF names refused, and
  // a resume in the other pairing. Absent in checkpoints written before it was recorded.
  std::optional<bool> hf_rope_pairing_differs;
  int64_t optimizer_steps = 0;                 // AdamW's step count (bias correction)
  std::optional<CheckpointDataPosition> data;  // token data sets only
  std::optional<CheckpointAdamW> adamw;        // absent in checkpoints before it was written
  std::vector<CheckpointFile> files;
  std::vector<CheckpointTensor> tensors;
  const CheckpointTensor* find(const std::string& name) const;
};

// The metadata of a tensor saved under a dim-0 sharding over `shard_world` ranks: shard rank
// i's piece is in shard_file_name(i, shard_world) (core/checkpoint/checkpoint_dir.h).
CheckpointTensor sharded_tensor(std::string name, std::string dtype, Shape shape, int shard_world);
// The metadata of a tensor saved under `layout` (NOTE [Strided pieces of tensor-parallel
// weights]): the pieces stored_pieces gives, in files shard_file_name(i, piece_files(layout)).
CheckpointTensor placed_tensor(std::string name, std::string dtype, Shape shape,
                               const PieceLayout& layout);

// NOTE [Persistent buffers in checkpoints]: a persistent buffer (register_buffer with
// persistent=True: DeepSeek-V3's expert_bias, NOTE [Expert bias] in core/model/expert_bias.h) is
// in the model's state dict, so DCP saves it; a non-persistent one (tokens_per_expert) is not.
// FSDP2 neither shards nor all-gathers buffers: every rank holds the same whole tensor, which
// DCP writes once (torch/distributed/checkpoint/_dedup_save_plans.py drops the duplicates; by
// default to the plan with the fewest bytes so far, with save_to_lowest_rank to rank 0). Here
// it is "buffer/<fqn>", whole, in file 0 (global rank 0's: replicate, shard and tp index 0, as
// save_to_lowest_rank), placements Replicate() on every mesh dim; every rank of any mesh reads
// it whole on resume. A checkpoint without it (written before buffers were saved) leaves the
// buffer at its initial zeros; one the model lacks is refused like an unknown parameter.
//
// The metadata of such a whole tensor over the saving `mesh` (its tp_degree, shard_world,
// replicate): one chunk, the full box, in file 0 of piece_files(mesh).
CheckpointTensor replicated_tensor(std::string name, std::string dtype, Shape shape,
                                   const PieceLayout& mesh);

nlohmann::json metadata_to_json(const CheckpointMetadata& m);
// Validates every field (types, ranges, chunks tiling each tensor, chunk files listed in
// files); throws InputError whose message starts with `source` and the JSON path.
CheckpointMetadata metadata_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace fullshard
