#pragma once
// `fullshard train --init-from WEIGHTS`: start training from safetensors weights (what
// `fullshard checkpoint export` writes, or a Hugging Face Llama / GPT-2 model) instead of the
// scenario's random init. Each rank reads only the rows of its shards (docs/checkpoints.md).
#include <string>

#include "core/runtime/backend.h"
#include "core/train/training_program.h"

namespace fullshard::runner {

// The files of `path`: a .safetensors file, a folder holding model.safetensors or
// model.safetensors.index.json (the sharded layout), or a folder torch.distributed.checkpoint
// wrote in its own format (.metadata and .distcp files: NOTE [DCP's own format]). Throws InputError naming `field`
// (--init-from, or the scenario's model.weights) or the file and tensor.
// Checks (before any worker starts) that every parameter of `s`'s model is there with the
// expected shape and a floating dtype; the first mismatch names the file and the tensor.
void validate_init_weights(const std::string& path, const Scenario& s,
                           const std::string& field = "--init-from");

// Overwrites this rank's parameter shards with the weights at `path`. Names: Hugging Face's
// (NOTE [Hugging Face layouts]; GPT-2 also without the "transformer." prefix) or fullshard's.
// F32, BF16 and F16 files load into F32 parameters (widening is exact).
void load_init_weights(Backend& b, TrainingProgram& prog, const Scenario& s,
                       const std::string& path, const std::string& field = "--init-from");

}  // namespace fullshard::runner
