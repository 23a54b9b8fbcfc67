// `fullshard checkpoint export --dcp`: a fullshard checkpoint's model state dict (parameters and
// persistent buffers) as a DCP folder
// (NOTE [DCP's own format] in core/checkpoint/dcp.h).
#include <cstring>
#include <filesystem>
#include <map>

#include "core/checkpoint/dcp.h"
#include "core/checkpoint/dcp_optim.h"
#include "core/checkpoint/export.h"
#include "core/checkpoint/safetensors.h"
#include "core/checkpoint/torch_save.h"
#include "core/common/error.h"
#include "core/common/output_file.h"

namespace fullshard {
namespace fs = std::filesystem;

namespace {

constexpr const char* kStatePrefixes[] = {"exp_avg/", "exp_avg_sq/"};  // fullshard's AdamW names

// Box `b` of a [R, C] tensor, transposed: the box of the [C, R] tensor, and its bytes.
std::vector<uint8_t> transpose_box(ChunkBox& b, const std::vector<uint8_t>& in, uint64_t esize) {
  const int64_t rows = b.lengths[0], cols = b.lengths[1];
  std::vector<uint8_t> out(in.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(&out[static_cast<size_t>(c * rows + r) * esize],
                  &in[static_cast<size_t>(r * cols + c) * esize], esize);
  b = {{b.offsets[1], b.offsets[0]}, {cols, rows}};
  return out;
}

}  // namespace

DcpExportResult export_dcp(CheckpointReader& reader, const DcpExportOptions& o) {
  const CheckpointMetadata& m = reader.metadata();
  check_hf_export(m, o.hf_names);
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec || !fs::is_directory(o.out))
    throw InputError("--dcp",
                     "cannot create folder '" + o.out + "'" + (ec ? ": " + ec.message() : ""),
                     "give a writable folder");
  // An earlier export's .metadata goes first: until the new one is written last, the folder is
  // not a checkpoint (the commit protocol of NOTE [Checkpoint commit]).
  fs::remove(fs::path(o.out) / kDcpMetadataFile, ec);

  struct Planned {
    const CheckpointTensor* source;
    HfTensorName out;
  };
  std::vector<Planned> plan;
  DcpMetadata dm;
  auto add = [&](const CheckpointTensor& t, const std::string& fqn, const std::string& state) {
    Planned p{&t, export_name(m.arch, fqn, o.hf_names)};
    if (p.out.per_expert)  // NOTE [Hugging Face names of experts]: no one DCP tensor holds them
      throw InputError("--names", "hf for '" + fqn + "', a routed experts' weight (" + m.arch +
                                      "), which Hugging Face stores as one tensor per expert",
                       "export --dcp with --names fullshard (torchtitan's names), or "
                       "--safetensors with Hugging Face names");
    FULLSHARD_CHECK(!p.out.transpose || t.shape.size() == 2, "transposed export of " + t.name);
    DcpTensor d{p.out.name, t.dtype, p.out.transpose ? Shape{t.shape[1], t.shape[0]} : t.shape,
                {}, nullptr};
    if (!state.empty()) {  // NOTE [AdamW state in DCP]: its parameter's chunks, under state.<fqn>
      d.path = dcp_optim_state_path(p.out.name, state);
      d.fqn = dcp_optim_state_key(p.out.name, state);
    }
    dm.tensors.push_back(std::move(d));
    plan.push_back(p);
  };
  // The model's state dict, as `export --safetensors`: the parameters and the persistent buffers
  // (a buffer is one chunk, the whole tensor, in file 0: get_model_state_dict's plain tensor
  // under its fqn, NOTE [Persistent buffers in checkpoints] in checkpoint_metadata.h).
  for (const auto& t : m.tensors)
    if (const std::string fqn = state_dict_fqn(t.name); !fqn.empty()) add(t, fqn, "");
  DcpExportResult res;
  res.tensors = plan.size();
  std::vector<std::string> trainable;  // the parameters with AdamW state
  bool has_state = false;
  for (const auto& t : m.tensors) has_state = has_state || t.name.rfind(kStatePrefixes[0], 0) == 0;
  if (o.optimizer && has_state && !m.adamw) {
    res.optimizer_note =
        "optimizer state not exported: the checkpoint predates recorded AdamW hyperparameters "
        "(param_groups); resume it for one step and save again";
  } else if (o.optimizer && has_state) {
    for (const auto& t : m.tensors)
      for (const char* prefix : kStatePrefixes)
        if (t.name.rfind(prefix, 0) == 0) {
          const std::string fqn = t.name.substr(std::strlen(prefix));
          const std::string what(prefix, std::strlen(prefix) - 1);
          add(t, fqn, what);
          if (what == "exp_avg") trainable.push_back(export_name(m.arch, fqn, o.hf_names).name);
          ++res.optimizer_tensors;
        }
  }
  // One .distcp file per fullshard shard file (a saving rank's pieces), pieces back to back.
  for (size_t f = 0; f < m.files.size(); ++f) {
    const std::string name = "__" + std::to_string(f) + "_0.distcp";
    const std::string path = (fs::path(o.out) / name).string();
    OutputFile out(path, "--dcp");
    uint64_t offset = 0;
    for (size_t k = 0; k < plan.size(); ++k) {
      const CheckpointTensor& t = *plan[k].source;
      const uint64_t esize = *safetensors_dtype_size(t.dtype);
      for (const auto& c : t.chunks) {
        if (c.file != m.files[f].name || box_numel(c.box) == 0) continue;
        ChunkBox box = c.box;
        std::vector<uint8_t> bytes(static_cast<size_t>(box_numel(box)) * esize);
        reader.read_box(t.name, box, bytes.data(), bytes.size());
        if (plan[k].out.transpose) bytes = transpose_box(box, bytes, esize);
        // The piece goes to the file as it is, between the archive's records (a piece of
        // 4 GiB or more gets zip64 fields, as torch.save writes it).
        const std::string_view piece(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        const TorchSaveParts archive =
            torch_save_archive_parts(t.dtype, box.lengths, piece.size(), crc32(piece), "--dcp");
        out.write(archive.head);
        out.write(piece);
        out.write(archive.tail);
        const uint64_t archive_size = archive.head.size() + piece.size() + archive.tail.size();
        dm.tensors[k].chunks.push_back({box, name, offset, archive_size});
        offset += archive_size;
        res.data_bytes += bytes.size();
        ++(k < res.tensors ? res.chunks : res.optimizer_chunks);
      }
    }
    if (f == 0 && !trainable.empty()) {  // the replicated step and the param group, written once
      const std::string step = dcp_step_archive(m.optimizer_steps);
      for (const auto& fqn : trainable) {
        out.write(step);
        dm.tensors.push_back({dcp_optim_state_key(fqn, "step"),
                              "F32",
                              {},
                              {{ChunkBox{{}, {}}, name, offset, step.size()}},
                              dcp_optim_state_path(fqn, "step")});
        offset += step.size();
        ++res.optimizer_tensors;
        ++res.optimizer_chunks;
      }
      for (auto& e : adamw_param_group_entries(*m.adamw, trainable)) {
        out.write(e.archive);
        dm.bytes.push_back({e.fqn, name, offset, e.archive.size(), e.path});
        offset += e.archive.size();
        ++res.param_group_entries;
      }
    }
    out.commit();
    res.files.push_back(path);
  }
  const std::string meta = (fs::path(o.out) / kDcpMetadataFile).string();
  write_output_file(meta, dcp_metadata_pickle(dm), "--dcp");
  res.files.push_back(meta);
  return res;
}

}  // namespace fullshard
