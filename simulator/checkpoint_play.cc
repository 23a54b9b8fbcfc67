#include "simulator/checkpoint_play.h"

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/common/error.h"
#include "core/mesh/device_mesh.h"
#include "core/model/transformer.h"
#include "simulator/checkpoint_cost.h"

namespace fullshard::sim {

bool writes_checkpoint(const Scenario& s, int rank) {
  const DeviceMesh mesh(s.fsdp.mesh_shape, s.fsdp.mesh_dim_names);
  int shard = mesh.dim_index("shard");
  if (shard < 0) shard = mesh.ndim() - 1;  // as mesh_info_for
  const int rep = mesh.dim_index("replicate");
  if (rep < 0 || rep == shard) return true;
  return mesh.coordinates(rank)[static_cast<size_t>(rep)] == 0;  // HSDP: replica 0 writes
}

bool saves_buffers(const Scenario& s) {
  Transformer model(s.model);
  bool any = false;
  model.root().for_each_module([&any](Module& m) {
    for (const ModuleBuffer& b : m.buffers) any = any || b.persistent;
  });
  return any;
}

CheckpointPlayer::CheckpointPlayer(SimBackend& backend, TrainingProgram& program, const Scenario& s,
                                   int run_steps)
    : b_(backend),
      prog_(program),
      every_(s.training.checkpoint.every),
      mode_(s.training.checkpoint.mode) {
  if (every_ <= 0) return;
  run_saves_ = run_steps / every_;
  // The node's writers (NOTE [Checkpoint cost]): their bytes share its storage bandwidth.
  const std::vector<uint64_t> shard = checkpoint_shard_bytes(s);
  const int per_node = std::max(1, s.hardware.gpus_per_node);
  const int node = b_.rank() / per_node;
  for (size_t r = 0; r < shard.size(); ++r)
    if (static_cast<int>(r) / per_node == node) node_bytes_ += shard[r];
  if (shard[static_cast<size_t>(b_.rank())] == 0) return;  // not a writer
  const AdamW& opt = prog_.optimizer();
  for (const OptimizerParam* p : opt.params())  // the parameter and its AdamW states
    bytes_ += 3 * p->local_tensor().nbytes();
  for (const OptimizerParam* p : prog_.frozen_params())  // no state (NOTE [Checkpoint cost])
    bytes_ += p->local_tensor().nbytes();
  if (b_.rank() == 0)  // rank 0 writes them, whole (NOTE [Persistent buffers in checkpoints])
    prog_.model().root().for_each_persistent_buffer(
        [this](ModuleBuffer& buf) { bytes_ += buf.tensor.nbytes(); });
}

void CheckpointPlayer::after_step(int step, bool last_played) {
  if (every_ <= 0) return;
  const bool scheduled = (step + 1) % every_ == 0;
  if (scheduled || (last_played && saves_ == 0 && run_saves_ > 0)) save();
}

void CheckpointPlayer::save() {
  ++saves_;
  if (bytes_ == 0) return;  // replicas other than the first write nothing
  b_.annotate("checkpoint save");
  if (mode_ == CheckpointSaveMode::kAsync &&
      write_done_ != 0) {  // the previous save's write must be done first
    b_.synchronize(write_done_);
    staging_.clear();  // freed: its file is written
  }
  constexpr StreamRole kCopy = StreamRole::kDeviceToHost;
  b_.wait_event(kCopy, b_.record_event(StreamRole::kDefault));  // after the optimizer step
  // State-dict order (checkpoint_copy_order), as the closed form copies them.
  // Module order -> (the parameter's view, its index in opt.params(), or -1 when frozen).
  const AdamW& opt = prog_.optimizer();
  std::unordered_map<const Param*, std::pair<const OptimizerParam*, int>> index;
  for (size_t i = 0; i < opt.params().size(); ++i)
    index[&opt.params()[i]->param()] = {opt.params()[i], static_cast<int>(i)};
  for (const OptimizerParam* p : prog_.frozen_params()) index[&p->param()] = {p, -1};
  std::vector<std::pair<const OptimizerParam*, int>> order;
  prog_.model().root().for_each_param([&](Param& p) {
    auto it = index.find(&p);
    FULLSHARD_CHECK(it != index.end(), p.fqn + ": a parameter neither trained nor frozen");
    order.push_back(it->second);
  });
  auto copy = [&](const Tensor& t, MemCategory category, const std::string& name) {
    OpCall op;
    op.kind = OpKind::kCopy;
    op.name = "checkpoint d2h " + name;
    op.inputs = {t.ref()};
    op.bytes = 2.0 * static_cast<double>(t.nbytes());  // read on the device, written on the host
    if (mode_ == CheckpointSaveMode::kAsync) {
      const Buffer hb = b_.allocate_host(t.nbytes(), category, "checkpoint staging " + name);
      staging_.push_back(adopt_buffer(b_, hb, t.meta()));
      op.outputs = {staging_.back().ref()};
    }
    b_.launch_pageable_copy(kCopy, op);
  };
  std::vector<const ModuleBuffer*> buffers;  // the persistent ones, module order
  prog_.model().root().for_each_persistent_buffer(
      [&](ModuleBuffer& buf) { buffers.push_back(&buf); });
  for (const CheckpointCopy& k : checkpoint_copy_order(prog_.model().root(), b_.rank() == 0)) {
    if (k.which == CheckpointCopy::kBuffer) {
      copy(buffers[k.index]->tensor, MemCategory::kUnshardedParam,
           "buffer/" + buffers[k.index]->fqn);
      continue;
    }
    const auto [p, i] = order[k.index];
    const std::string& fqn = p->param().fqn;
    if (k.which == CheckpointCopy::kParam) {
      copy(p->local_tensor(), MemCategory::kShardedParam, "param/" + fqn);
    } else if (const size_t j = static_cast<size_t>(i);
               i >= 0 && opt.has_state() && opt.exp_avg(j)) {
      copy(k.which == CheckpointCopy::kExpAvg ? opt.exp_avg(j) : opt.exp_avg_sq(j),
           MemCategory::kOptimizerState,
           (k.which == CheckpointCopy::kExpAvg ? "exp_avg/" : "exp_avg_sq/") + fqn);
    }
  }
  b_.synchronize(b_.record_event(kCopy));  // DCP's copies to the CPU block the caller
  write_done_ = b_.storage_write("checkpoint write", bytes_, node_bytes_);
  if (mode_ == CheckpointSaveMode::kSync) {
    b_.synchronize(write_done_);
    write_done_ = 0;
  }
  b_.annotate("checkpoint end");
}

void CheckpointPlayer::finish() {
  if (write_done_ == 0) return;
  b_.synchronize(write_done_);
  write_done_ = 0;
  staging_.clear();
  b_.annotate("checkpoint collected");
}

}  // namespace fullshard::sim
