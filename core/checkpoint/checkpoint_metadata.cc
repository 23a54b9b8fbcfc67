#include "core/checkpoint/checkpoint_metadata.h"

#include <limits>
#include <set>

#include "core/checkpoint/checkpoint_dir.h"
#include "core/checkpoint/safetensors.h"
#include "core/common/error.h"
#include "core/scenario/json_reader.h"

namespace fullshard {
namespace jr = json_reader;
namespace {

constexpr int64_t kMaxI = std::numeric_limits<int64_t>::max();

Shape parse_dims(const nlohmann::json& v, const std::string& path, size_t n) {
  if (!v.is_array() || v.size() != n)
    throw InputError(
        path,
        "is " + jr::show(v) + ", not " + std::to_string(n) + " numbers (one per dim of shape)",
        "the metadata is damaged");
  Shape out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(jr::get_int(v[i], jr::index_path(path, i), 0, kMaxI, "0"));
  return out;
}

void parse_tensor(const nlohmann::json& t, const std::string& path,
                  const std::set<std::string>& files, int version, CheckpointTensor& out) {
  jr::require_object(t, path,
                     R"({"name": "param/w", "dtype": "F32", "shape": [4], "chunks": [...]})");
  jr::reject_unknown_fields(t, path, {"name", "dtype", "shape", "placements", "chunks"});
  for (const char* k : {"name", "dtype", "shape", "chunks"})
    jr::require_field(t, path, k, "the metadata is damaged");
  out.name = jr::get_string(t["name"], jr::child_path(path, "name"), "\"param/w\"");
  out.dtype = jr::get_string(t["dtype"], jr::child_path(path, "dtype"), "\"F32\"");
  if (!safetensors_dtype_size(out.dtype))
    throw InputError(jr::child_path(path, "dtype"), "unknown dtype '" + out.dtype + "'",
                     "use F32, BF16, F16, ...");
  const auto& shape = t["shape"];
  if (!shape.is_array() || shape.empty() || shape.size() > 8)
    throw InputError(jr::child_path(path, "shape"), "is " + jr::show(shape) + ", not 1 to 8 dims",
                     "write [rows, ...]");
  for (size_t i = 0; i < shape.size(); ++i)
    out.shape.push_back(jr::get_int(shape[i], jr::index_path(jr::child_path(path, "shape"), i), 0,
                                    int64_t{1} << 40, "4096"));
  if (t.contains("placements")) {
    const std::string pp = jr::child_path(path, "placements");
    if (!t["placements"].is_array() || t["placements"].size() > 8)
      throw InputError(pp, "is " + jr::show(t["placements"]) + ", not a list of placements",
                       "the metadata is damaged");
    for (size_t i = 0; i < t["placements"].size(); ++i)
      out.placements.push_back(
          jr::get_string(t["placements"][i], jr::index_path(pp, i), "\"Shard(0)\""));
  }
  const auto& chunks = t["chunks"];
  const std::string cpath = jr::child_path(path, "chunks");
  if (!chunks.is_array())
    throw InputError(cpath, "is " + jr::describe(chunks) + ", not an array",
                     "the metadata is damaged");
  // Version 1 stored row ranges {row_begin, rows}; version 2 boxes {offsets, lengths}.
  const std::vector<std::string> keys =
      version == 1 ? std::vector<std::string>{"file", "row_begin", "rows"}
                   : std::vector<std::string>{"file", "offsets", "lengths"};
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::string p = jr::index_path(cpath, i);
    jr::require_object(
        chunks[i], p,
        R"({"file": "shard-00000-of-00002.safetensors", "offsets": [0, 0], "lengths": [9, 4]})");
    jr::reject_unknown_fields(chunks[i], p, keys);
    for (const auto& k : keys) jr::require_field(chunks[i], p, k, "the metadata is damaged");
    CheckpointChunk c;
    c.file = jr::get_string(chunks[i]["file"], jr::child_path(p, "file"),
                            "\"shard-00000-of-00002.safetensors\"");
    if (!files.count(c.file))
      throw InputError(jr::child_path(p, "file"), "'" + c.file + "' is not in files",
                       "the metadata is damaged");
    if (version == 1) {
      c.box = rows_box(
          out.shape,
          jr::get_int(chunks[i]["row_begin"], jr::child_path(p, "row_begin"), 0, kMaxI, "0"),
          jr::get_int(chunks[i]["rows"], jr::child_path(p, "rows"), 0, kMaxI, "9"));
    } else {
      c.box.offsets =
          parse_dims(chunks[i]["offsets"], jr::child_path(p, "offsets"), out.shape.size());
      c.box.lengths =
          parse_dims(chunks[i]["lengths"], jr::child_path(p, "lengths"), out.shape.size());
    }
    out.chunks.push_back(c);
  }
  std::vector<ChunkBox> boxes;
  for (const auto& c : out.chunks) boxes.push_back(c.box);
  validate_boxes(out.shape, boxes, cpath + " of '" + out.name + "'");
}

CheckpointMetadata parse(const nlohmann::json& j) {
  jr::require_object(j, "", R"({"format": "fullshard-checkpoint", ...})");
  const std::vector<std::string> known = {"format", "version",         "scenario", "arch",
                                          "step",   "next_step",       "seed",     "world_size",
                                          "mesh",   "optimizer_steps", "files",    "tensors"};
  std::vector<std::string> accepted = known;
  accepted.push_back("data");   // optional: token data sets only
  accepted.push_back("adamw");  // optional: the run's AdamW hyperparameters
  accepted.push_back("hf_rope_pairing_differs");  // optional: older checkpoints lack it
  jr::reject_unknown_fields(j, "", accepted);
  for (const auto& k : known)
    jr::require_field(j, "", k, "the metadata is damaged or not a fullshard checkpoint");
  if (j["format"] != "fullshard-checkpoint")
    throw InputError("format", "is " + jr::show(j["format"]) + ", not \"fullshard-checkpoint\"",
                     "give a folder that `fullshard train --checkpoint-dir` wrote");
  CheckpointMetadata m;
  m.version = static_cast<int>(jr::get_int(j["version"], "version", 1, 1000, "2"));
  if (m.version < 1 || m.version > kCheckpointFormatVersion)
    throw InputError("version",
                     "is " + std::to_string(m.version) + "; this fullshard reads versions 1 to " +
                         std::to_string(kCheckpointFormatVersion),
                     "use the fullshard that wrote the checkpoint");
  m.scenario = jr::get_string(j["scenario"], "scenario", "\"tiny\"");
  m.arch = jr::get_choice(j["arch"], "arch", {"llama", "gpt2", "mixtral", "qwen3_moe", "deepseek_v3"});
  if (j.contains("hf_rope_pairing_differs"))
    m.hf_rope_pairing_differs =
        jr::get_bool(j["hf_rope_pairing_differs"], "hf_rope_pairing_differs");
  m.step = jr::get_int(j["step"], "step", 0, kMaxI, "3");
  m.next_step = jr::get_int(j["next_step"], "next_step", 0, kMaxI, "3");
  const auto& seed = j["seed"];
  if (!seed.is_number_integer() ||
      (seed.is_number_integer() && !seed.is_number_unsigned() && seed.get<int64_t>() < 0))
    throw InputError("seed", "is " + jr::describe(seed) + ", not an integer >= 0",
                     "the metadata is damaged");
  m.seed = seed.get<uint64_t>();
  m.world_size = static_cast<int>(jr::get_int(j["world_size"], "world_size", 1, 1 << 20, "2"));
  jr::require_object(j["mesh"], "mesh", R"({"replicate": 1, "shard": 2, "tp": 1})");
  jr::reject_unknown_fields(j["mesh"], "mesh", {"replicate", "shard", "tp", "ep"});
  for (const char* k : {"replicate", "shard"})
    jr::require_field(j["mesh"], "mesh", k, "the metadata is damaged");
  m.replicate =
      static_cast<int>(jr::get_int(j["mesh"]["replicate"], "mesh.replicate", 1, 1 << 20, "1"));
  m.shard = static_cast<int>(jr::get_int(j["mesh"]["shard"], "mesh.shard", 1, 1 << 20, "2"));
  if (j["mesh"].contains("tp"))
    m.tp = static_cast<int>(jr::get_int(j["mesh"]["tp"], "mesh.tp", 1, 1 << 20, "2"));
  if (static_cast<int64_t>(m.replicate) * m.shard * m.tp != m.world_size)
    throw InputError("mesh",
                     "replicate " + std::to_string(m.replicate) + " x shard " +
                         std::to_string(m.shard) +
                         (m.tp > 1 ? " x tp " + std::to_string(m.tp) : "") + " is not world_size " +
                         std::to_string(m.world_size),
                     "the metadata is damaged");
  if (j["mesh"].contains("ep"))
    m.ep = static_cast<int>(jr::get_int(j["mesh"]["ep"], "mesh.ep", 1, 1 << 20, "2"));
  if (m.shard % m.ep != 0)
    throw InputError(
        "mesh.ep",
        "is " + std::to_string(m.ep) + ", which does not divide shard " + std::to_string(m.shard),
        "the metadata is damaged");
  m.optimizer_steps = jr::get_int(j["optimizer_steps"], "optimizer_steps", 0, kMaxI, "3");
  if (j.contains("data")) {
    const auto& d = j["data"];
    jr::require_object(d, "data",
                       R"({"source": "train.bin", "samples": 64, "epoch": 0, "window": 64})");
    const std::vector<std::string> dk = {"source", "samples", "epoch", "window"};
    jr::reject_unknown_fields(d, "data", dk);
    for (const auto& k : dk) jr::require_field(d, "data", k, "the metadata is damaged");
    CheckpointDataPosition p;
    p.source = jr::get_string(d["source"], "data.source", "\"train.bin\"");
    p.samples = jr::get_int(d["samples"], "data.samples", 0, kMaxI, "64");
    p.epoch = jr::get_int(d["epoch"], "data.epoch", 0, kMaxI, "0");
    p.window = jr::get_int(d["window"], "data.window", 0, kMaxI, "64");
    m.data = p;
  }
  if (j.contains("adamw")) {
    const auto& a = j["adamw"];
    jr::require_object(a, "adamw",
                       R"({"lr": 3e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1})");
    const std::vector<std::string> ak = {"lr", "beta1", "beta2", "eps", "weight_decay"};
    jr::reject_unknown_fields(a, "adamw", ak);
    for (const auto& k : ak) jr::require_field(a, "adamw", k, "the metadata is damaged");
    CheckpointAdamW w;
    w.lr = jr::get_number(a["lr"], "adamw.lr", 0, true, 1e9, true, "3e-4");
    w.beta1 = jr::get_number(a["beta1"], "adamw.beta1", 0, true, 1, false, "0.9");
    w.beta2 = jr::get_number(a["beta2"], "adamw.beta2", 0, true, 1, false, "0.95");
    w.eps = jr::get_number(a["eps"], "adamw.eps", 0, true, 1e9, true, "1e-8");
    w.weight_decay = jr::get_number(a["weight_decay"], "adamw.weight_decay", 0, true, 1e9, true, "0.1");
    m.adamw = w;
  }
  if (!j["files"].is_array())
    throw InputError("files", "is " + jr::describe(j["files"]) + ", not an array",
                     "the metadata is damaged");
  std::set<std::string> files;
  for (size_t i = 0; i < j["files"].size(); ++i) {
    const std::string p = jr::index_path("files", i);
    const auto& f = j["files"][i];
    jr::require_object(f, p, R"({"name": "shard-00000-of-00002.safetensors", "bytes": 1024})");
    jr::reject_unknown_fields(f, p, {"name", "bytes"});
    for (const char* k : {"name", "bytes"}) jr::require_field(f, p, k, "the metadata is damaged");
    CheckpointFile cf;
    cf.name = jr::get_string(f["name"], jr::child_path(p, "name"),
                             "\"shard-00000-of-00002.safetensors\"");
    if (cf.name.empty() || cf.name.find('/') != std::string::npos || cf.name[0] == '.')
      throw InputError(jr::child_path(p, "name"), "'" + cf.name + "' is not a plain file name",
                       "the metadata is damaged (files are inside the checkpoint folder)");
    if (!files.insert(cf.name).second)
      throw InputError(jr::child_path(p, "name"), "'" + cf.name + "' is listed twice",
                       "the metadata is damaged");
    cf.bytes = static_cast<uint64_t>(
        jr::get_int(f["bytes"], jr::child_path(p, "bytes"), 8, kMaxI, "1024"));
    m.files.push_back(cf);
  }
  if (!j["tensors"].is_array())
    throw InputError("tensors", "is " + jr::describe(j["tensors"]) + ", not an array",
                     "the metadata is damaged");
  std::set<std::string> names;
  for (size_t i = 0; i < j["tensors"].size(); ++i) {
    CheckpointTensor t;
    parse_tensor(j["tensors"][i], jr::index_path("tensors", i), files, m.version, t);
    if (!names.insert(t.name).second)
      throw InputError(jr::index_path("tensors", i), "tensor '" + t.name + "' is listed twice",
                       "the metadata is damaged");
    m.tensors.push_back(std::move(t));
  }
  return m;
}

}  // namespace

const CheckpointTensor* CheckpointMetadata::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

CheckpointTensor sharded_tensor(std::string name, std::string dtype, Shape shape, int shard_world) {
  PieceLayout l;
  l.shard_world = shard_world;
  return placed_tensor(std::move(name), std::move(dtype), std::move(shape), l);
}

CheckpointTensor placed_tensor(std::string name, std::string dtype, Shape shape,
                               const PieceLayout& layout) {
  CheckpointTensor t;
  t.name = std::move(name);
  t.dtype = std::move(dtype);
  t.shape = std::move(shape);
  t.placements = dtensor_placements(layout);
  for (const auto& p : stored_pieces(t.shape, layout))
    t.chunks.push_back({shard_file_name(p.file_index, piece_files(layout)), p.box});
  return t;
}

CheckpointTensor replicated_tensor(std::string name, std::string dtype, Shape shape,
                                   const PieceLayout& mesh) {
  CheckpointTensor t;
  t.name = std::move(name);
  t.dtype = std::move(dtype);
  t.shape = std::move(shape);
  t.placements = replicated_placements(mesh);
  t.chunks.push_back({shard_file_name(0, piece_files(mesh)), full_box(t.shape)});
  return t;
}

nlohmann::json metadata_to_json(const CheckpointMetadata& m) {
  nlohmann::json j = nlohmann::json::object();
  j["format"] = "fullshard-checkpoint";
  j["version"] = kCheckpointFormatVersion;  // chunks are always written as boxes
  j["scenario"] = m.scenario;
  j["arch"] = m.arch;
  if (m.hf_rope_pairing_differs) j["hf_rope_pairing_differs"] = *m.hf_rope_pairing_differs;
  j["step"] = m.step;
  j["next_step"] = m.next_step;
  j["seed"] = m.seed;
  j["world_size"] = m.world_size;
  j["mesh"] = {{"replicate", m.replicate}, {"shard", m.shard}, {"tp", m.tp}};
  if (m.ep > 1) j["mesh"]["ep"] = m.ep;  // NOTE [Pieces of expert-parallel weights]
  j["optimizer_steps"] = m.optimizer_steps;
  if (m.adamw)
    j["adamw"] = {{"lr", m.adamw->lr},
                  {"beta1", m.adamw->beta1},
                  {"beta2", m.adamw->beta2},
                  {"eps", m.adamw->eps},
                  {"weight_decay", m.adamw->weight_decay}};
  if (m.data)
    j["data"] = {{"source", m.data->source},
                 {"samples", m.data->samples},
                 {"epoch", m.data->epoch},
                 {"window", m.data->window}};
  j["files"] = nlohmann::json::array();
  for (const auto& f : m.files) j["files"].push_back({{"name", f.name}, {"bytes", f.bytes}});
  j["tensors"] = nlohmann::json::array();
  for (const auto& t : m.tensors) {
    nlohmann::json chunks = nlohmann::json::array();
    for (const auto& c : t.chunks)
      chunks.push_back({{"file", c.file}, {"offsets", c.box.offsets}, {"lengths", c.box.lengths}});
    nlohmann::json jt = {{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}};
    if (!t.placements.empty()) jt["placements"] = t.placements;
    jt["chunks"] = chunks;
    j["tensors"].push_back(jt);
  }
  return j;
}

CheckpointMetadata metadata_from_json(const nlohmann::json& j, const std::string& source) {
  try {
    return parse(j);
  } catch (const InputError& e) {
    throw InputError(source, e.what(), "");
  }
}

}  // namespace fullshard
