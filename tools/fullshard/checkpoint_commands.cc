#include "tools/fullshard/checkpoint_commands.h"

#include <fmt/format.h>

#include <iostream>

#include <nlohmann/json.hpp>

#include "core/checkpoint/checkpoint_dir.h"
#include "core/checkpoint/dcp.h"
#include "core/checkpoint/export.h"
#include "core/common/error.h"
#include "core/common/user_text.h"
#include "simulator/report.h"

namespace fullshard::cli {
namespace {

using nlohmann::json;

uint64_t tensor_bytes(const CheckpointTensor& t) {
  return static_cast<uint64_t>(numel(t.shape)) * *safetensors_dtype_size(t.dtype);
}

int inspect(const CheckpointFlags& f) {
  const std::string folder = resolve_checkpoint(f.path, "checkpoint inspect");
  CheckpointReader reader(folder);
  const CheckpointMetadata& m = reader.metadata();
  reader.verify();  // throws at the first inconsistency: exit 2 with the file and tensor
  uint64_t file_bytes = 0, params = 0;
  for (const auto& fi : m.files) file_bytes += fi.bytes;
  for (const auto& t : m.tensors)
    if (t.name.rfind("param/", 0) == 0) params += static_cast<uint64_t>(numel(t.shape));
  if (f.json) {
    json j = metadata_to_json(m);
    j["folder"] = folder;
    j["consistent"] = true;
    j["parameters"] = params;
    j["file_bytes"] = file_bytes;
    std::cout << j.dump(1) << "\n";
    return 0;
  }
  std::cout << fmt::format("checkpoint {}\n", printable(folder, 1024));
  std::cout << fmt::format(
      "  scenario {} ({}), step {} (resumes at step {}), seed {}, AdamW steps {}\n",
      printable(m.scenario), m.arch, m.step, m.next_step, m.seed, m.optimizer_steps);
  std::cout << fmt::format("  saved by {} ranks: mesh replicate {} x shard {}{}{}; {} files, {}\n",
                           m.world_size, m.replicate, m.shard,
                           m.tp > 1 ? fmt::format(" x tp {}", m.tp) : "",
                           m.ep > 1 ? fmt::format(" (efsdp {} x ep {})", m.shard / m.ep, m.ep) : "",
                           m.files.size(), sim::format_bytes(file_bytes));
  std::cout << fmt::format("  {} tensors, {} parameters\n", m.tensors.size(), params);
  // With tensor or expert parallelism the pieces are boxes of the global tensor (NOTE [Pieces as
  // boxes], NOTE [Pieces of expert-parallel weights]).
  const bool boxes = m.tp > 1 || m.ep > 1;
  std::cout << fmt::format("  {:<48} {:>5} {:>14} {:>12}  {}\n", "tensor", "dtype", "shape",
                           "bytes", boxes ? "placements: pieces@file" : "rows per file");
  for (const auto& t : m.tensors) {
    std::string pieces;
    if (boxes) {  // DTensor placements, then every piece's slice of the global tensor and its file
      for (const auto& p : t.placements) pieces += (pieces.empty() ? "" : ", ") + p;
      pieces += ":";
      for (const auto& c : t.chunks) {
        size_t file = 0;
        while (file < m.files.size() && m.files[file].name != c.file) ++file;
        pieces += " " + box_str(c.box) + "@" + std::to_string(file);
      }
    } else {
      for (const auto& c : t.chunks)
        pieces += (pieces.empty() ? "" : " ") + std::to_string(c.box.lengths[0]);
    }
    std::cout << fmt::format("  {:<48} {:>5} {:>14} {:>12}  {}\n", printable(t.name, 48), t.dtype,
                             shape_str(t.shape), tensor_bytes(t), pieces);
  }
  std::cout << "  consistent: every file's size and header and every tensor's pieces match "
               "metadata.json\n";
  return 0;
}

int export_command(const CheckpointFlags& f) {
  const std::string folder = resolve_checkpoint(f.path, "checkpoint export");
  if (f.safetensors.empty() && f.dcp.empty())
    throw InputError("checkpoint export", "needs an output",
                     "add --safetensors OUT.safetensors or --dcp FOLDER");
  CheckpointReader reader(folder);
  if (!f.dcp.empty()) {
    if (f.max_shard_bytes != 0)
      throw InputError("--max-shard-size", "applies to --safetensors, not to --dcp",
                       "drop it: a DCP folder has one .distcp file per saving rank");
    DcpExportOptions o;
    o.out = f.dcp;
    o.hf_names = f.names == "hf";
    o.optimizer = !f.model_only;
    const DcpExportResult r = export_dcp(reader, o);
    std::cout << fmt::format("exported {} tensors ({} chunks, {}) of {} to {} (PyTorch DCP)\n",
                             r.tensors, r.chunks, sim::format_bytes(r.data_bytes),
                             printable(folder, 1024), printable(f.dcp, 1024));
    if (r.optimizer_tensors > 0)
      std::cout << fmt::format(
          "  and AdamW's state at step {}: {} tensors ({} chunks; state.FQN.exp_avg, .exp_avg_sq, "
          ".step), {} param_groups entries (get_optimizer_state_dict's keys)\n",
          reader.metadata().optimizer_steps, r.optimizer_tensors, r.optimizer_chunks,
          r.param_group_entries);
    if (!r.optimizer_note.empty()) std::cout << "  " << r.optimizer_note << "\n";
    for (const auto& p : r.files) std::cout << "  " << printable(p, 1024) << "\n";
    return 0;
  }
  ExportOptions o;
  o.out = f.safetensors;
  o.max_shard_bytes = f.max_shard_bytes;
  o.hf_names = f.names == "hf";
  const ExportResult r = export_safetensors(reader, o);
  std::cout << fmt::format("exported {} tensors ({}) of {} to {}\n", r.tensors,
                           sim::format_bytes(r.data_bytes), printable(folder, 1024),
                           printable(f.safetensors, 1024));
  for (const auto& p : r.files) std::cout << "  " << printable(p, 1024) << "\n";
  return 0;
}

}  // namespace

CLI::App* add_checkpoint_command(CLI::App& app, CheckpointFlags& f) {
  CLI::App* c = app.add_subcommand("checkpoint",
                                   "inspect or export sharded checkpoints (docs/checkpoints.md)");
  c->require_subcommand(1);
  f.inspect = c->add_subcommand(
      "inspect",
      "what a checkpoint holds (step, mesh, tensors, sizes) and whether it is consistent");
  f.inspect
      ->add_option("dir", f.path,
                   "a --checkpoint-dir folder (its latest step) or one step-N folder")
      ->required();
  f.inspect->add_flag("--json", f.json, "print the metadata as JSON");
  f.exporter = c->add_subcommand(
      "export",
      "write the parameters as safetensors or a PyTorch DCP folder, with Hugging Face names and "
      "layouts");
  f.exporter
      ->add_option("dir", f.path,
                   "a --checkpoint-dir folder (its latest step) or one step-N folder")
      ->required();
  CLI::Option* st = f.exporter->add_option("--safetensors", f.safetensors,
                                           "OUT.safetensors, or a folder with --max-shard-size");
  CLI::Option* dcp = f.exporter->add_option(
      "--dcp", f.dcp,
      "a folder for torch.distributed.checkpoint (.metadata and one __<rank>_0.distcp per saving "
      "rank), which dcp.load reads into an FSDP2 model");
  st->excludes(dcp);
  dcp->excludes(st);
  f.exporter->add_option(
      "--max-shard-size", f.max_shard_bytes,
      "write model-0000N-of-0000M.safetensors files of at most this many bytes and the index");
  f.exporter
      ->add_option("--names", f.names,
                   "hf (Hugging Face Llama / GPT-2 names and layouts, default) or fullshard")
      ->check(CLI::IsMember({"hf", "fullshard"}));
  f.exporter->add_flag("--model-only", f.model_only,
                       "with --dcp: the parameters only (get_model_state_dict), without AdamW's "
                       "state (get_optimizer_state_dict)");
  return c;
}

int cmd_checkpoint(const CheckpointFlags& f) {
  if (f.inspect && *f.inspect) return inspect(f);
  return export_command(f);
}

}  // namespace fullshard::cli
