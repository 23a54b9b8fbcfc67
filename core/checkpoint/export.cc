#include "core/checkpoint/export.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/output_file.h"

namespace fullshard {
namespace fs = std::filesystem;
namespace {

constexpr const char* kParamPrefix = "param/";
constexpr const char* kBufferPrefix = "buffer/";

struct Planned {
  const CheckpointTensor* source;
  HfTensorName out;
  Shape shape;  // exported shape
  uint64_t bytes;
  int64_t expert = -1;  // one expert's slice [expert] of a routed experts' weight; -1: whole
};

// [rows, cols] -> [cols, rows], elements of `esize` bytes.
std::vector<uint8_t> transposed(const std::vector<uint8_t>& in, int64_t rows, int64_t cols,
                                uint64_t esize) {
  std::vector<uint8_t> out(in.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(&out[static_cast<size_t>((c * rows + r)) * esize],
                  &in[static_cast<size_t>((r * cols + c)) * esize], esize);
  return out;
}

// Writes `tensors` (a slice of the plan) into one safetensors file, one tensor in memory at a time.
void write_file(CheckpointReader& reader, const std::vector<Planned>& tensors,
                const std::string& path) {
  std::vector<SafetensorsTensor> heads;
  for (const auto& t : tensors) heads.push_back({t.out.name, t.source->dtype, t.shape, nullptr});
  OutputFile out(path, "--safetensors");
  out.write(safetensors_header_bytes(heads, {{"format", "pt"}}, "--safetensors"));
  for (const auto& t : tensors) {
    std::vector<uint8_t> bytes(t.bytes);
    if (t.expert >= 0) {  // NOTE [Hugging Face names of experts]
      ChunkBox box = full_box(t.source->shape);
      box.offsets[0] = t.expert;
      box.lengths[0] = 1;
      reader.read_boxes(t.source->name, {box}, bytes.data(), bytes.size());
    } else {
      reader.read_shard(t.source->name, 1, 0, bytes.data(), bytes.size());
    }
    if (t.out.transpose)
      bytes = transposed(bytes, t.source->shape[0], t.source->shape[1],
                         *safetensors_dtype_size(t.source->dtype));
    if (!bytes.empty())
      out.write(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  out.commit();
}

}  // namespace

std::string state_dict_fqn(const std::string& name) {
  for (const char* prefix : {kParamPrefix, kBufferPrefix})
    if (name.rfind(prefix, 0) == 0) return name.substr(std::strlen(prefix));
  return "";
}

HfTensorName export_name(const std::string& arch, const std::string& fqn, bool hf_names) {
  if (!hf_names) return {fqn, false};
  const auto n = hf_tensor_name(arch, fqn);
  if (!n)
    throw InputError("--safetensors",
                     "parameter '" + fqn + "' of this " + arch + " model has no Hugging Face name",
                     "export with --names fullshard");
  return *n;
}

void check_hf_export(const CheckpointMetadata& m, bool hf_names) {
  if (!hf_names || !m.hf_rope_pairing_differs.value_or(false)) return;
  throw InputError("--names",
                   "hf for a " + m.arch + " checkpoint whose RoPE pairs q / k columns " +
                       (m.arch == "deepseek_v3" ? "by halves (rope \"fused\" or \"rotate_half\")"
                                                : "adjacently (rope \"complex\")") +
                       ", unlike Hugging Face's files; the rows are not permuted on export",
                   "export with --names fullshard");
}

ExportResult export_safetensors(CheckpointReader& reader, const ExportOptions& o) {
  const CheckpointMetadata& m = reader.metadata();
  check_hf_export(m, o.hf_names);
  std::vector<Planned> plan;
  for (const auto& t : m.tensors) {
    // The model's state dict: parameters and persistent buffers (NOTE [Persistent buffers in
    // checkpoints] in checkpoint_metadata.h); optimizer state is not part of the weights.
    const std::string fqn = state_dict_fqn(t.name);
    if (fqn.empty()) continue;
    Planned p{&t, export_name(m.arch, fqn, o.hf_names), t.shape,
              static_cast<uint64_t>(numel(t.shape)) * *safetensors_dtype_size(t.dtype)};
    if (p.out.transpose) {
      FULLSHARD_CHECK(t.shape.size() == 2,
                      "transposed export of a tensor that is not 2-D: " + t.name);
      p.shape = {t.shape[1], t.shape[0]};
    }
    if (p.out.per_expert) {  // E tensors, one per expert (NOTE [Hugging Face names of experts])
      p.shape.erase(p.shape.begin());
      p.bytes /= static_cast<uint64_t>(t.shape[0]);
      for (int64_t e = 0; e < t.shape[0]; ++e) {
        Planned one = p;
        one.out = {p.out.expert_name(e), false, false};
        one.expert = e;
        plan.push_back(std::move(one));
      }
      continue;
    }
    plan.push_back(std::move(p));
  }
  ExportResult res;
  res.tensors = plan.size();
  for (const auto& p : plan) res.data_bytes += p.bytes;
  if (o.max_shard_bytes == 0) {
    write_file(reader, plan, o.out);
    res.files.push_back(o.out);
    return res;
  }
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec || !fs::is_directory(o.out))
    throw InputError("--safetensors",
                     "cannot create folder '" + o.out + "'" + (ec ? ": " + ec.message() : ""),
                     "give a writable folder (with --max-shard-size the output is a folder)");
  std::vector<std::vector<Planned>> groups;
  uint64_t in_group = 0;
  for (auto& p : plan) {
    if (groups.empty() || (in_group > 0 && in_group + p.bytes > o.max_shard_bytes)) {
      groups.emplace_back();
      in_group = 0;
    }
    groups.back().push_back(p);
    in_group += p.bytes;
  }
  if (groups.empty()) groups.emplace_back();
  nlohmann::json index = {{"metadata", {{"total_size", res.data_bytes}}},
                          {"weight_map", nlohmann::json::object()}};
  for (size_t i = 0; i < groups.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, groups.size());
    const std::string path = (fs::path(o.out) / name).string();
    write_file(reader, groups[i], path);
    res.files.push_back(path);
    for (const auto& p : groups[i]) index["weight_map"][p.out.name] = name;
  }
  const std::string index_path = (fs::path(o.out) / "model.safetensors.index.json").string();
  write_output_file(index_path, index.dump(2) + "\n", "--safetensors");
  res.files.push_back(index_path);
  return res;
}

}  // namespace fullshard
