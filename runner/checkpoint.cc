#include "runner/checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <numeric>

#include "core/checkpoint/checkpoint_dir.h"
#include "core/checkpoint/dcp.h"
#include "core/checkpoint/hf_names.h"
#include "core/checkpoint/rank_pieces.h"
#include "core/common/error.h"
#include "core/model/transformer.h"

namespace fullshard::runner {
namespace {

constexpr const char* kBufferPrefix = "buffer/";  // NOTE [Persistent buffers in checkpoints]

void check_seed(const CheckpointMetadata& m, const Scenario& s, const std::string& folder) {
  if (m.seed != s.training.seed)
    throw InputError("--resume",
                     "checkpoint '" + folder + "' was saved with training.seed " +
                         std::to_string(m.seed) + ", the scenario has " +
                         std::to_string(s.training.seed),
                     "resume with the scenario that wrote it (the seed decides the data order)");
}

}  // namespace

std::vector<LocalCheckpointTensor> local_checkpoint_tensors(TrainingProgram& prog) {
  std::vector<LocalCheckpointTensor> out;
  const AdamW& opt = prog.optimizer();
  for (size_t i = 0; i < opt.params().size(); ++i) {
    OptimizerParam* p = opt.params()[i];
    const Param* param = &p->param();
    out.push_back({"param/" + param->fqn, param->global_shape(), p->local_tensor().ref(), param});
    if (opt.has_state() && opt.exp_avg(i)) {
      out.push_back({"exp_avg/" + param->fqn, param->global_shape(), opt.exp_avg(i).ref(), param});
      out.push_back(
          {"exp_avg_sq/" + param->fqn, param->global_shape(), opt.exp_avg_sq(i).ref(), param});
    }
  }
  // Frozen parameters (no optimizer state) are still the model's state dict.
  for (OptimizerParam* p : prog.frozen_params()) {
    const Param* param = &p->param();
    out.push_back({"param/" + param->fqn, param->global_shape(), p->local_tensor().ref(), param});
  }
  // NOTE [Persistent buffers in checkpoints] (core/checkpoint/checkpoint_metadata.h).
  prog.model().root().for_each_persistent_buffer([&out](ModuleBuffer& buf) {
    out.push_back(
        {std::string(kBufferPrefix) + buf.fqn, buf.meta.shape, buf.tensor.ref(), nullptr, &buf});
  });
  return out;
}

void world_barrier(Backend& b, const std::string& name) {
  ProcessGroup world;
  world.name = "world";
  world.ranks.resize(static_cast<size_t>(b.world_size()));
  std::iota(world.ranks.begin(), world.ranks.end(), 0);
  CollectiveCall c;
  c.kind = CollectiveKind::kBarrier;
  c.name = name;
  b.collective(StreamRole::kDefault, c, world);
  b.synchronize_device();
}

int64_t samples_per_step(const Scenario& s) {
  int64_t n = 0;
  for (int r = 0; r < s.world_size(); ++r)
    if (tensor_parallel_for(s, r).index == 0)
      n += s.training.batch_for(r);  // a tp group reads one batch
  return n * s.training.grad_accum_steps;
}

void resume_data_position(const std::string& folder, const Scenario& s, BatchSource& data) {
  if (!data.tokens || data.random_windows) return;  // random windows: a pure function of the step
  CheckpointReader reader(folder);
  const CheckpointMetadata& m = reader.metadata();
  data.sample_base = m.data ? m.data->samples - m.next_step * samples_per_step(s) : 0;
}

CheckpointMetadata checkpoint_metadata(Backend& b, TrainingProgram& prog, const Scenario& s,
                                       int64_t steps_done,
                                       const std::vector<LocalCheckpointTensor>& tensors,
                                       const BatchSource* data) {
  const RankPieces pieces = rank_pieces(s, b.rank());
  const int files = piece_files(pieces.mesh);
  CheckpointMetadata m;
  m.scenario = s.name;
  m.arch = hf_arch(s.model);
  m.hf_rope_pairing_differs = hf_rope_pairing_differs(s.model);
  m.step = steps_done;
  m.next_step = steps_done;
  m.seed = s.training.seed;
  m.world_size = b.world_size();
  m.shard = pieces.mesh.shard_world;
  m.tp = pieces.mesh.tp_degree;
  m.replicate = pieces.mesh.replicate;
  m.ep = s.expert_parallel.degree;
  m.optimizer_steps = prog.optimizer().steps_taken();
  const auto& oo = s.training.optimizer;
  m.adamw = CheckpointAdamW{oo.lr, oo.beta1, oo.beta2, oo.eps, oo.weight_decay};
  if (data && data->tokens) {
    const DataPosition p = data->position(steps_done, samples_per_step(s), s.training.seq_len);
    m.data = CheckpointDataPosition{s.training.data.path, p.samples, p.epoch, p.window};
  }
  for (int r = 0; r < files; ++r) m.files.push_back({shard_file_name(r, files), 0});
  for (const auto& t : tensors) {
    std::string dtype(safetensors_dtype_name(t.local.meta.dtype));
    m.tensors.push_back(
        t.buffer
            ? replicated_tensor(t.name, std::move(dtype), t.global_shape, pieces.mesh)
            : placed_tensor(t.name, std::move(dtype), t.global_shape, pieces.layout_of(*t.param)));
  }
  return m;
}

int64_t load_checkpoint(Backend& b, TrainingProgram& prog, const Scenario& s,
                        const std::string& folder) {
  CheckpointReader reader(folder);
  const CheckpointMetadata& m = reader.metadata();
  check_seed(m, s, folder);
  if (m.optimizer_steps > 0) prog.optimizer().init_state();
  const auto tensors = local_checkpoint_tensors(prog);
  // The first mismatch in either direction names the tensor.
  for (const auto& t : m.tensors) {
    bool found = false;
    for (const auto& l : tensors) found = found || l.name == t.name;
    if (!found)
      throw InputError("--resume",
                       "checkpoint '" + folder + "' holds tensor '" + t.name +
                           "' that the scenario's model has not",
                       "resume with the scenario that wrote it");
  }
  const RankPieces pieces = rank_pieces(s, b.rank());
  for (const auto& l : tensors) {
    const CheckpointTensor* t = m.find(l.name);
    const std::string dtype(safetensors_dtype_name(l.local.meta.dtype));
    if (!t && l.name.rfind("param/", 0) != 0)
      continue;  // a state never created (no gradient yet), a buffer saved before buffers were
                 // (NOTE [Persistent buffers in checkpoints]): stays zero
    if (!t)
      throw InputError("--resume",
                       "checkpoint '" + folder + "' has no tensor '" + l.name +
                           "' that the scenario's model has",
                       "resume with the scenario that wrote it");
    if (t->shape != l.global_shape || t->dtype != dtype)
      throw InputError("--resume",
                       "tensor '" + l.name + "' is " + t->dtype + " " + shape_str(t->shape) +
                           " in checkpoint '" + folder + "' but " + dtype + " " +
                           shape_str(l.global_shape) + " in the scenario",
                       "resume with the scenario that wrote it");
    std::vector<uint8_t> bytes(l.local.nbytes());
    if (l.buffer)  // whole on every rank, whatever the saving mesh
      reader.read_box(l.name, full_box(l.global_shape), bytes.data(), bytes.size());
    else
      reader.read_boxes(l.name, pieces.boxes_of(*l.param), bytes.data(), bytes.size());
    b.copy_from_host(l.local, bytes.data());
  }
  prog.optimizer().set_steps_taken(static_cast<int>(m.optimizer_steps));
  return m.next_step;
}

std::string resolve_resume(const std::string& resume, const std::string& checkpoint_dir) {
  if (resume.empty()) return "";
  if (resume == "latest") {
    if (checkpoint_dir.empty())
      throw InputError("--resume", "is 'latest' but no --checkpoint-dir is given",
                       "add --checkpoint-dir DIR, or give --resume the checkpoint folder");
    return resolve_checkpoint(checkpoint_dir, "--resume");
  }
  if (is_dcp_folder(resume))  // NOTE [AdamW state in DCP]: PyTorch's folder has no data position
    throw InputError("--resume",
                     "'" + resume +
                         "' is a torch.distributed.checkpoint folder (.metadata), not a fullshard "
                         "checkpoint",
                     "start from it with --init-from " + resume +
                         " (its weights, and AdamW's state when it holds one)");
  return resolve_checkpoint(resume, "--resume");
}

void validate_checkpoint_flags(const std::string& checkpoint_dir, int checkpoint_every,
                               const std::string& resume, int steps, const Scenario& s,
                               int keep_last) {
  if (keep_last < 0)
    throw InputError("--keep-last", "is " + std::to_string(keep_last),
                     "use a number of checkpoints >= 1 (0: keep all)");
  if (keep_last > 0 && checkpoint_every <= 0)
    throw InputError("--keep-last", "is given without --checkpoint-every",
                     "add --checkpoint-every N");
  if (checkpoint_every < 0)
    throw InputError("--checkpoint-every", "is " + std::to_string(checkpoint_every),
                     "use a number of steps >= 1 (0: never)");
  if (checkpoint_every > 0 && checkpoint_dir.empty())
    throw InputError("--checkpoint-every", "is given without --checkpoint-dir",
                     "add --checkpoint-dir DIR");
  if (checkpoint_every >
      0) {  // saving: the folder must exist and be writable (resuming only reads it)
    std::error_code ec;
    std::filesystem::create_directories(checkpoint_dir, ec);
    if (ec || ::access(checkpoint_dir.c_str(), W_OK) != 0)
      throw InputError(
          "--checkpoint-dir",
          "'" + checkpoint_dir + "' is not a writable folder" + (ec ? ": " + ec.message() : ""),
          "give a folder you can write");
  }
  const std::string folder = resolve_resume(resume, checkpoint_dir);
  if (folder.empty()) return;
  const CheckpointReader reader(folder);
  if (reader.metadata().next_step >= steps)
    throw InputError("--resume",
                     "checkpoint '" + folder + "' is at step " +
                         std::to_string(reader.metadata().next_step) +
                         ", not before the run's last step " + std::to_string(steps),
                     "pass --steps larger than " + std::to_string(reader.metadata().next_step));
  check_seed(reader.metadata(), s, folder);
  // NOTE [Rotary pairing of weight files] in core/checkpoint/hf_names.h: q / k rows trained in one
  // RoPE pairing compute another attention in the other.
  if (const auto& p = reader.metadata().hf_rope_pairing_differs;
      p && *p != hf_rope_pairing_differs(s.model))
    throw InputError("--resume",
                     "checkpoint '" + folder + "' was trained with RoPE pairing q / k columns " +
                         ((*p) == (hf_arch(s.model) == "deepseek_v3") ? "by halves"
                                                                      : "adjacently") +
                         ", the scenario's model.implementation.rope pairs them otherwise",
                     "resume with the model.implementation.rope that wrote it");
  // The parameters, in both directions (optimizer states follow their parameters).
  Transformer model(s.model);
  std::vector<std::pair<std::string, Shape>> params;
  model.root().for_each_param([&](Param& p) { params.push_back({"param/" + p.fqn, p.shape}); });
  for (const auto& [name, shape] : params) {
    const CheckpointTensor* t = reader.metadata().find(name);
    if (!t)
      throw InputError(
          "--resume",
          "checkpoint '" + folder + "' has no tensor '" + name + "' that the scenario's model has",
          "resume with the scenario that wrote it");
    if (t->shape != shape)
      throw InputError("--resume",
                       "tensor '" + name + "' is " + shape_str(t->shape) + " in checkpoint '" +
                           folder + "' but " + shape_str(shape) + " in the scenario",
                       "resume with the scenario that wrote it");
  }
  // The persistent buffers: a checkpoint may lack them (saved before buffers were), not hold
  // others (NOTE [Persistent buffers in checkpoints]).
  std::vector<std::pair<std::string, Shape>> buffers;
  model.root().for_each_persistent_buffer(
      [&](ModuleBuffer& buf) { buffers.push_back({kBufferPrefix + buf.fqn, buf.meta.shape}); });
  for (const auto& t : reader.metadata().tensors) {
    bool found = false;
    if (t.name.rfind(kBufferPrefix, 0) == 0) {
      for (const auto& [name, shape] : buffers) {
        if (name != t.name) continue;
        found = true;
        if (t.shape != shape)
          throw InputError("--resume",
                           "tensor '" + name + "' is " + shape_str(t.shape) + " in checkpoint '" +
                               folder + "' but " + shape_str(shape) + " in the scenario",
                           "resume with the scenario that wrote it");
      }
    } else {
      const std::string param = "param/" + t.name.substr(t.name.find('/') + 1);
      for (const auto& p : params) found = found || p.first == param;
    }
    if (!found)
      throw InputError("--resume",
                       "checkpoint '" + folder + "' holds tensor '" + t.name +
                           "' that the scenario's model has not",
                       "resume with the scenario that wrote it");
  }
}

}  // namespace fullshard::runner
