#include "runner/init_weights.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "core/checkpoint/dcp.h"
#include "core/checkpoint/dcp_optim.h"
#include "core/checkpoint/hf_names.h"
#include "core/checkpoint/rank_pieces.h"
#include "core/checkpoint/safetensors.h"
#include "core/common/error.h"
#include "core/common/json_file.h"
#include "core/fsdp/shard_layout.h"
#include "core/model/lora.h"
#include "core/model/transformer.h"
#include "core/tensor/float_convert.h"

namespace fullshard::runner {
namespace fs = std::filesystem;
namespace {

// A tensor of the weights: where it is and what it holds.
struct Stored {
  std::string name, dtype;
  Shape shape;
  const SafetensorsReader* file = nullptr;  // in a safetensors file, or
  DcpReader* dcp = nullptr;                 // in a DCP folder's chunks
  std::string where() const {
    return (file ? file->path() : dcp->folder()) + ": tensor '" + name + "'";
  }
};

// The weight files of `path` and which file holds which tensor name.
class WeightFiles {
 public:
  // `field`: what the error names ("--init-from" or "model.weights").
  WeightFiles(const std::string& path, const std::string& field) {
    std::error_code ec;
    if (is_dcp_folder(
            path)) {  // torch.distributed.checkpoint's own format (NOTE [DCP's own format])
      dcp_ = std::make_unique<DcpReader>(path);
      return;
    }
    if (!fs::is_directory(path, ec)) {
      open(path);
      return;
    }
    const fs::path index = fs::path(path) / "model.safetensors.index.json";
    if (fs::exists(index, ec)) {
      const auto j = read_json_input(index.string(), "a model.safetensors.index.json");
      if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        throw InputError(index.string(), "has no \"weight_map\" object",
                         "give the index Hugging Face writes");
      for (const auto& [name, file] : j["weight_map"].items()) {
        if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
          throw InputError(index.string() + ": weight_map." + name,
                           "is not a file name in the folder", "");
        open((fs::path(path) / file.get<std::string>()).string());
      }
      return;
    }
    if (fs::exists(fs::path(path) / "model.safetensors", ec)) {
      open((fs::path(path) / "model.safetensors").string());
      return;
    }
    throw InputError(
        field,
        "folder '" + path +
            "' holds neither model.safetensors, model.safetensors.index.json nor a DCP .metadata",
        "give a .safetensors file or a folder `checkpoint export` or dcp.save wrote");
  }

  DcpReader* dcp() const { return dcp_.get(); }

  // Tensor `name`, or nullopt.
  std::optional<Stored> find(const std::string& name) const {
    if (dcp_) {
      const DcpTensor* t = dcp_->metadata().find(name);
      if (!t) return std::nullopt;
      return Stored{name, t->dtype, t->shape, nullptr, dcp_.get()};
    }
    if (auto it = where_.find(name); it != where_.end()) {
      const SafetensorsEntry* e = it->second->header().find(name);
      return Stored{name, e->dtype, e->shape, it->second, nullptr};
    }
    return std::nullopt;
  }

 private:
  void open(const std::string& file) {
    if (files_.count(file)) return;
    auto r = std::make_unique<SafetensorsReader>(file);
    for (const auto& e : r->header().tensors) where_.emplace(e.name, r.get());
    files_.emplace(file, std::move(r));
  }
  std::map<std::string, std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, const SafetensorsReader*> where_;
  std::unique_ptr<DcpReader> dcp_;
};

// Names a parameter may have in a weights file, and whether that layout is transposed or one
// tensor per expert (NOTE [Hugging Face names of experts]).
std::vector<HfTensorName> candidates(const Scenario& s, const std::string& fqn) {
  std::vector<HfTensorName> c;
  if (auto hf = hf_tensor_name(hf_arch(s.model), fqn)) {
    c.push_back(*hf);
    if (hf->name.rfind("transformer.", 0) == 0)
      c.push_back({hf->name.substr(12), hf->transpose});  // openai-community/gpt2
  }
  c.push_back({fqn, false});
  return c;
}

struct Located {
  Stored t;  // with `experts`: expert 0's tensor
  bool transpose = false;
  std::vector<Stored> experts;  // a routed experts' weight stored per expert: E tensors
  // Its Hugging Face rows in another RoPE pairing: row_order[r] is the file row of global row r
  // (NOTE [Rotary pairing of weight files] in core/checkpoint/hf_names.h); empty: the same.
  std::vector<int64_t> row_order;
};


// Box `box` of the stored tensor, in its dtype, row-major.
std::vector<uint8_t> read_stored(const Stored& t, const ChunkBox& box) {
  const uint64_t esize = *safetensors_dtype_size(t.dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(box_numel(box)) * esize);
  if (t.dcp) {
    t.dcp->read_box(t.name, box, bytes.data(), bytes.size());
    return bytes;
  }  // runs of the file's row-major tensor: one when the box is whole rows
  for (const ChunkRead& r : reads_for_box(t.shape, esize, {full_box(t.shape)}, box))
    t.file->read(t.name, r.src_offset, r.bytes, bytes.data() + r.dst_offset);
  return bytes;
}

// Box `box` of the located tensor: of the stored one, or of the stack of the experts' tensors
// (the box's dim 0 picks experts, its other dims the box of each).
std::vector<uint8_t> read_located(const Located& l, const ChunkBox& box) {
  if (l.experts.empty()) return read_stored(l.t, box);
  ChunkBox inner;
  inner.offsets.assign(box.offsets.begin() + 1, box.offsets.end());
  inner.lengths.assign(box.lengths.begin() + 1, box.lengths.end());
  std::vector<uint8_t> bytes;
  for (int64_t e = box.offsets[0]; e < box.offsets[0] + box.lengths[0]; ++e) {
    const auto part = read_stored(l.experts[static_cast<size_t>(e)], inner);
    bytes.insert(bytes.end(), part.begin(), part.end());
  }
  return bytes;
}

// Checks a stored tensor's dtype and shape against what parameter `fqn` needs.
void check_stored(const Stored& t, const Shape& want, const std::string& fqn) {
  const std::string where = t.where();
  if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
    throw InputError(where, "is " + t.dtype + ", not a floating dtype",
                     "give F32, BF16 or F16 weights");
  if (t.shape != want)
    throw InputError(where,
                     "is " + shape_str(t.shape) + " but the scenario's parameter '" + fqn +
                         "' needs " + shape_str(want),
                     "give weights of the scenario's model (same dims and layer count)");
}

// Finds parameter `fqn` of shape `shape` and checks its dtype and shape; nullopt when the
// weights have no tensor of that name.
std::optional<Located> try_locate(const WeightFiles& w, const Scenario& s, const std::string& fqn,
                                  const Shape& shape) {
  for (const auto& c : candidates(s, fqn)) {
    if (c.per_expert) {  // E tensors [shape[1:]] (NOTE [Hugging Face names of experts])
      const auto first = w.find(c.expert_name(0));
      if (!first) continue;
      Located l{*first, false, {}, {}};
      const Shape each(shape.begin() + 1, shape.end());
      for (int64_t e = 0; e < shape[0]; ++e) {
        const auto t = w.find(c.expert_name(e));
        if (!t)
          throw InputError(first->where(),
                           "is there but expert " + std::to_string(e) + "'s '" +
                               c.expert_name(e) + "' is not (parameter '" + fqn + "' has " +
                               std::to_string(shape[0]) + " experts)",
                           "give weights of the scenario's model (same expert count)");
        check_stored(*t, each, fqn);
        if (t->dtype != first->dtype)
          throw InputError(t->where(), "is " + t->dtype + " where expert 0 is " + first->dtype,
                           "give every expert's weights in one dtype");
        l.experts.push_back(*t);
      }
      return l;
    }
    const auto t = w.find(c.name);
    if (!t) continue;
    check_stored(*t, c.transpose ? Shape{shape[1], shape[0]} : shape, fqn);
    return Located{*t, c.transpose, {},
                   c.name != fqn ? hf_rope_row_order(s.model, fqn, shape[0]) : std::vector<int64_t>{}};
  }
  return std::nullopt;
}

Located locate(const WeightFiles& w, const Scenario& s, const std::string& fqn, const Shape& shape,
               const std::string& field) {
  if (auto l = try_locate(w, s, fqn, shape)) return *l;
  const HfTensorName first = candidates(s, fqn).front();
  throw InputError(field,
                   "no tensor '" + (first.per_expert ? first.expert_name(0) : first.name) +
                       "' (parameter '" + fqn + "') in the weights",
                   "give weights of the scenario's model (fullshard checkpoint export writes them)");
}

std::vector<float> to_f32(const std::vector<uint8_t>& bytes, const std::string& dtype) {
  const size_t esize = dtype == "F32" ? 4 : 2;
  std::vector<float> v(bytes.size() / esize);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == "F32") {
      std::memcpy(&v[i], &bytes[4 * i], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      v[i] = dtype == "BF16" ? bf16_to_float(h) : fp16_to_float(h);
    }
  }
  return v;
}

// This rank's FSDP rows of its tp-local tensor of `param`, read from the whole file tensor:
// local row l of a tp-local tensor is global row l (replicated), t*L + l (Shard(0)), or row
// l % L of block l / L of the stacked blocks (tp_blocks); Shard(1) takes columns [t*C, +C).
std::vector<float> local_rows_of(const Param& param, const Located& l, const RankPieces& pieces) {
  const Shape global = param.global_shape();
  const auto all = to_f32(read_stored(l.t, full_box(l.t.shape)), l.t.dtype);
  const int64_t grows = global[0], gcols = global.size() > 1 ? global[1] : 1;
  const int64_t lrows = param.shape[0], lcols = param.shape.size() > 1 ? param.shape[1] : 1;
  const int64_t t = pieces.tp_index, T = param.tp_degree, block = lrows / param.tp_blocks;
  const int64_t first = shard_row_offset(lrows, pieces.mesh.shard_world, pieces.shard_rank);
  const int64_t rows = shard_rows(lrows, pieces.mesh.shard_world, pieces.shard_rank);
  const int64_t col0 = param.tp_placement == TpPlacement::kShard1 ? t * lcols : 0;
  auto global_row = [&](int64_t r) {
    if (param.tp_placement != TpPlacement::kShard0) return r;
    return (r / block) * block * T + t * block + r % block;
  };
  // The file's element (row, col) of our [out, in] layout (a Conv1D stores [in, out]).
  auto at = [&](int64_t row, int64_t col) {
    if (!l.row_order.empty()) row = l.row_order[static_cast<size_t>(row)];
    return all[static_cast<size_t>(l.transpose ? col * grows + row : row * gcols + col)];
  };
  std::vector<float> values(static_cast<size_t>(rows * lcols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < lcols; ++c)
      values[static_cast<size_t>(r * lcols + c)] = at(global_row(first + r), col0 + c);
  return values;
}

// A DCP folder with optimizer state also restores AdamW's state when every parameter is
// trainable; a frozen base or LoRA adapters start their optimizer fresh (NOTE [AdamW state in
// DCP] in core/checkpoint/dcp_optim.h).
bool loads_optimizer_state(const WeightFiles& w, const Scenario& s) {
  return w.dcp() && dcp_has_optimizer_state(w.dcp()->metadata()) && s.training.frozen.empty() &&
         !s.model.lora.enabled();
}

}  // namespace

void validate_init_weights(const std::string& path, const Scenario& s, const std::string& field) {
  const WeightFiles w(path, field);
  Transformer model(s.model);
  std::vector<std::pair<std::string, Shape>> located;  // name in the files, stored shape
  bool per_expert = false;
  model.root().for_each_param([&](Param& p) {
    if (is_lora_adapter(p)) return;
    const Located l = locate(w, s, p.fqn, p.shape, field);
    located.push_back({l.t.name, l.t.shape});
    per_expert = per_expert || !l.experts.empty();
  });
  if (per_expert && loads_optimizer_state(w, s))
    throw InputError(field,
                     "holds AdamW state of routed experts stored one tensor per expert (Hugging "
                     "Face names), which is not read",
                     "give a DCP with torchtitan's names (checkpoint export --dcp --names "
                     "fullshard), or one without optimizer state");
  model.root().for_each_persistent_buffer(  // a buffer's tensor, if any, must fit
      [&](ModuleBuffer& buf) { try_locate(w, s, buf.fqn, buf.meta.shape); });
  if (loads_optimizer_state(w, s)) check_dcp_adamw_state(w.dcp()->metadata(), located, path);
}

void load_init_weights(Backend& b, TrainingProgram& prog, const Scenario& s,
                       const std::string& path, const std::string& field) {
  const WeightFiles w(path, field);
  const RankPieces pieces = rank_pieces(s, b.rank());
  // The trainable parameters, then the frozen ones (a LoRA base); adapters keep their init, as
  // PEFT adds them to a loaded model.
  std::vector<OptimizerParam*> params = prog.optimizer().params();
  params.insert(params.end(), prog.frozen_params().begin(), prog.frozen_params().end());
  // Loads the stored tensor `l` (parameter `param`'s layout) into the rank's local shard `local`.
  auto load_into = [&](const Param& param, const Located& l, const TensorRef& local) {
    const Shape global = param.global_shape();
    FULLSHARD_CHECK(local.meta.dtype == DType::kFloat32 || local.meta.dtype == DType::kBFloat16 ||
                        local.meta.dtype == DType::kFloat16,
                    "init-from: sharded parameters are fp32, or a frozen bf16 / fp16");
    // fp32 values into the shard's dtype (a frozen base kept in bf16 rounds each once).
    auto copy_in = [&](const std::vector<float>& v) {
      if (local.meta.dtype == DType::kFloat32) return b.copy_from_host(local, v.data());
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i)
        h[i] = local.meta.dtype == DType::kBFloat16 ? float_to_bf16(v[i]) : float_to_fp16(v[i]);
      b.copy_from_host(local, h.data());
    };
    if (param.tp_blocks > 1 || (l.transpose && param.tp_degree > 1) || !l.row_order.empty()) {
      FULLSHARD_CHECK(l.experts.empty(), "init-from: per-expert tensors of a tp-split weight");
      // Not one box of the file's tensor (GPT-2's fused c_attn, NOTE [Fused qkv under tensor
      // parallelism]; a Conv1D [in, out] under tp; rotary rows in the other pairing): read it
      // whole, pick this rank's rows.
      copy_in(local_rows_of(param, l, pieces));
      return;
    }
    // This rank's piece of the full tensor: FSDP's dim-0 chunk (NOTE [torch.chunk layout]) of
    // its tensor-parallel block (NOTE [Strided pieces of tensor-parallel weights]).
    const ChunkBox box = pieces.box_of(param);
    FULLSHARD_CHECK(box.lengths == local.meta.shape, "init-from: piece " + box_str(box) + " of " +
                                                         param.fqn + " is not the local shard " +
                                                         shape_str(local.meta.shape));
    std::vector<float> values;
    if (!l.transpose) {  // only this rank's box (DCP: from the chunks that overlap it)
      values = to_f32(read_located(l, box), l.t.dtype);
    } else {  // Conv1D [in, out]: our rows are its columns; read it whole
      FULLSHARD_CHECK(pieces.layout_of(param).tp_dim < 0,
                      "init-from: a transposed layout under tensor parallelism");
      const auto all = to_f32(read_stored(l.t, full_box(l.t.shape)), l.t.dtype);
      const int64_t rows = box.lengths[0], begin = box.offsets[0], out = global[0], in = global[1];
      values.resize(static_cast<size_t>(rows * in));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < in; ++c)
          values[static_cast<size_t>(r * in + c)] = all[static_cast<size_t>(c * out + begin + r)];
    }
    copy_in(values);
  };
  for (OptimizerParam* p : params) {
    const Param& param = p->param();
    if (is_lora_adapter(param)) continue;
    load_into(param, locate(w, s, param.fqn, param.global_shape(), field), p->local_tensor().ref());
  }
  // Persistent buffers (DeepSeek-V3's expert bias, HF's e_score_correction_bias) are whole on
  // every rank; weights without one leave it at its init (zeros), as torchtitan's init does.
  prog.model().root().for_each_persistent_buffer([&](ModuleBuffer& buf) {
    const auto l = try_locate(w, s, buf.fqn, buf.meta.shape);
    if (!l) return;
    FULLSHARD_CHECK(buf.tensor && buf.meta.dtype == DType::kFloat32,
                    "init-from: buffer " + buf.fqn + " is not an allocated fp32 tensor");
    const auto v = to_f32(read_located(*l, full_box(buf.meta.shape)), l->t.dtype);
    b.copy_from_host(buf.tensor.ref(), v.data());
  });
  if (!loads_optimizer_state(w, s)) return;
  // AdamW's exp_avg / exp_avg_sq have their parameter's layout (NOTE [AdamW state in DCP]).
  AdamW& opt = prog.optimizer();
  opt.init_state();
  std::vector<std::string> names;
  for (size_t i = 0; i < opt.params().size(); ++i) {
    const Param& param = opt.params()[i]->param();
    const Located l = locate(w, s, param.fqn, param.global_shape(), field);
    FULLSHARD_CHECK(l.experts.empty(), "init-from: AdamW state of per-expert tensors "
                                       "(validate_init_weights refuses it)");
    names.push_back(l.t.name);
    for (const char* what : {"exp_avg", "exp_avg_sq"}) {
      Located st = l;
      st.t.name = dcp_optim_state_key(l.t.name, what);
      const DcpTensor* t = w.dcp()->metadata().find(st.t.name);
      FULLSHARD_CHECK(t, "init-from: " + st.t.name + " (checked by validate_init_weights)");
      st.t.dtype = t->dtype;
      const bool sq = std::strcmp(what, "exp_avg_sq") == 0;
      load_into(param, st, (sq ? opt.exp_avg_sq(i) : opt.exp_avg(i)).ref());
    }
  }
  opt.set_steps_taken(static_cast<int>(read_dcp_adamw_step(*w.dcp(), names)));
}

}  // namespace fullshard::runner
