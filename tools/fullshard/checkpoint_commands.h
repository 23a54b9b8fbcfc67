#pragma once
// `fullshard checkpoint inspect DIR [--json]` and `fullshard checkpoint export DIR
// --safetensors OUT [--max-shard-size BYTES] [--names hf|fullshard]` or `--dcp FOLDER` (PyTorch
// DCP's own format; docs/checkpoints.md).
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace fullshard::cli {

struct CheckpointFlags {
  std::string path;         // a --checkpoint-dir folder (its latest step) or a step folder
  bool json = false;        // inspect: JSON instead of the table
  std::string safetensors;  // export: the output file (folder with max_shard_bytes)
  std::string dcp;          // export: a DCP folder (.metadata + .distcp files) instead
  uint64_t max_shard_bytes = 0;
  std::string names = "hf";  // export: "hf" or "fullshard"
  bool model_only = false;   // export --dcp: the parameters without AdamW's state
  CLI::App* inspect = nullptr;
  CLI::App* exporter = nullptr;
};

CLI::App* add_checkpoint_command(CLI::App& app, CheckpointFlags& flags);
int cmd_checkpoint(const CheckpointFlags& flags);

}  // namespace fullshard::cli
