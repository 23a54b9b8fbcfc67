#pragma once
// `fullshard checkpoint export`: a sharded checkpoint's parameters as one consolidated
// model.safetensors, or Hugging Face's sharded layout (model-0000N-of-0000M.safetensors and
// model.safetensors.index.json), with Hugging Face names and layouts (NOTE [Hugging Face
// layouts]). An offline tool, not a rank: it holds one tensor in memory at a time.
#include <cstdint>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_dir.h"
#include "core/checkpoint/hf_names.h"

namespace fullshard {

struct ExportOptions {
  std::string out;  // a .safetensors file, or a folder with max_shard_bytes
  uint64_t max_shard_bytes =
      0;  // 0: one file; else files of at most this many data bytes (a larger tensor gets its own)
  bool hf_names = true;  // false: fullshard's names and layouts, unchanged
};

struct ExportResult {
  std::vector<std::string> files;  // written, in order (the index last when sharded)
  size_t tensors = 0;
  uint64_t data_bytes = 0;
};

// The model's state dict: every parameter and persistent buffer (NOTE [Persistent buffers in
// checkpoints] in checkpoint_metadata.h), in the metadata's order. Throws InputError (where
// "--safetensors") for a tensor with no Hugging Face name or an unwritable output, and the
// reader's errors for damaged checkpoint files.
ExportResult export_safetensors(CheckpointReader& reader, const ExportOptions& o);

// The model state-dict key of checkpoint tensor `name`: "<fqn>" of "param/<fqn>" and of a
// persistent buffer's "buffer/<fqn>"; "" for optimizer state.
std::string state_dict_fqn(const std::string& name);

// The exported name and whether the layout is transposed, for parameter or buffer `fqn`.
HfTensorName export_name(const std::string& arch, const std::string& fqn, bool hf_names);
// Refuses Hugging Face names for a checkpoint whose RoPE pairing is not its files' (NOTE [Rotary
// pairing of weight files] in core/checkpoint/hf_names.h; the rows are not permuted on export).
void check_hf_export(const CheckpointMetadata& m, bool hf_names);

}  // namespace fullshard
