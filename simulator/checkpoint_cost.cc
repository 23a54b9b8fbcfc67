#include "simulator/checkpoint_cost.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"
#include "core/mesh/device_mesh.h"
#include "core/mesh/expert_mesh.h"
#include "core/model/lora.h"
#include "core/model/transformer.h"
#include "core/scenario/lora_checks.h"
#include "core/train/training_program.h"

namespace fullshard::sim {

namespace {

// Per writer class (its shard index, and whether it writes the persistent buffers: global rank
// 0, file 0's writer), its tensors' bytes in copy order; per rank, its class (none: it does
// not write).
using WriterClass = std::pair<int, bool>;
struct WriterTensors {
  std::map<WriterClass, std::vector<uint64_t>> by_class;
  std::vector<std::optional<WriterClass>> class_of_rank;
};

WriterTensors writer_tensors(const Scenario& s) {
  const int world = s.world_size();
  // Local (tensor- and expert-parallel) shapes are alike on every tp and ep rank; FSDP shards
  // their rows, an expert weight's over its efsdp ranks (NOTE [Pieces of expert-parallel
  // weights] in core/checkpoint/piece_layout.h), on dim 1 where efsdp exceeds its experts.
  Transformer model(s.model, tensor_parallel_for(s, 0), expert_parallel_for(s, 0));
  // Each parameter's storage dtype and trainability as the program sets them before
  // fully_shard: model.to(orig_dtype), then the frozen / LoRA base parameters (NOTE [Frozen
  // parameters] in core/model/lora.cc). A frozen one saves no optimizer state.
  set_orig_dtype(model.root(), s.training.orig_dtype);
  freeze_parameters(model.root(), s.training.frozen, s.model.lora.enabled(), frozen_dtype(s),
                    s.training.nf4);
  struct Local {
    int64_t rows, row_elems;
    int ep;
    bool dim1;
    uint64_t elem_bytes;
    bool has_state;
  };
  std::vector<Local> params;
  const DeviceMesh mesh(s.fsdp.mesh_shape, s.fsdp.mesh_dim_names);
  int shard = mesh.dim_index("shard");
  if (shard < 0) shard = mesh.ndim() - 1;  // as mesh_info_for
  const int rep = mesh.dim_index("replicate");
  const int w = mesh.shape()[static_cast<size_t>(shard)];
  model.root().for_each_param([&](Param& p) {
    const int ep = p.ep_degree;
    params.push_back({p.shape[0], row_numel(p.shape), ep,
                      ep > 1 && expert_shard_dim(p.global_shape()[0], ep, w / ep) == 1,
                      static_cast<uint64_t>(dtype_size(p.dtype)), p.requires_grad});
  });
  // The persistent buffers, whole (NOTE [Persistent buffers in checkpoints] in
  // core/checkpoint/checkpoint_metadata.h).
  std::vector<uint64_t> buffers;
  model.root().for_each_persistent_buffer(
      [&](ModuleBuffer& b) { buffers.push_back(static_cast<uint64_t>(b.meta.nbytes())); });
  // The elements shard index `idx` stores of `l`.
  auto stored = [w](const Local& l, int idx) -> int64_t {
    if (l.ep <= 1) return shard_rows(l.rows, w, idx) * l.row_elems;
    const int efsdp = w / l.ep;
    if (l.dim1) return l.rows * l.row_elems / efsdp;
    return shard_rows(l.rows, efsdp, idx / l.ep) * l.row_elems;
  };
  // Copy order without and with the buffers (global rank 0).
  const std::vector<CheckpointCopy> orders[2] = {checkpoint_copy_order(model.root(), false),
                                                 checkpoint_copy_order(model.root(), true)};
  WriterTensors out;
  out.class_of_rank.assign(static_cast<size_t>(world), std::nullopt);
  for (int r = 0; r < world; ++r) {
    const std::vector<int> c = mesh.coordinates(r);
    if (rep >= 0 && rep != shard && c[static_cast<size_t>(rep)] != 0)
      continue;  // HSDP: replica 0 writes
    const WriterClass k{c[static_cast<size_t>(shard)], r == 0};
    out.class_of_rank[static_cast<size_t>(r)] = k;
    auto [it, added] = out.by_class.emplace(k, std::vector<uint64_t>{});
    if (added)
      for (const CheckpointCopy& copy : orders[k.second ? 1 : 0]) {
        if (copy.which == CheckpointCopy::kBuffer) {
          it->second.push_back(buffers[copy.index]);
          continue;
        }
        const Local& l = params[copy.index];
        if (copy.which != CheckpointCopy::kParam && !l.has_state) continue;
        it->second.push_back(l.elem_bytes * static_cast<uint64_t>(stored(l, k.first)));
      }
  }
  return out;
}

}  // namespace

std::vector<CheckpointCopy> checkpoint_copy_order(Module& root, bool buffers) {
  std::vector<CheckpointCopy> order;
  size_t params = 0, persistent = 0;
  root.for_each_module([&](Module& m) {  // nn.Module.state_dict: own params, own buffers, children
    for (size_t i = 0; i < m.params.size(); ++i)
      order.push_back({params++, CheckpointCopy::kParam});
    for (const ModuleBuffer& b : m.buffers)
      if (b.persistent) {
        if (buffers) order.push_back({persistent, CheckpointCopy::kBuffer});
        ++persistent;
      }
  });
  for (size_t i = 0; i < params; ++i) {
    order.push_back({i, CheckpointCopy::kExpAvg});
    order.push_back({i, CheckpointCopy::kExpAvgSq});
  }
  return order;
}

double checkpoint_copy_seconds(const std::vector<uint64_t>& bytes, double bandwidth,
                               double launch_s) {
  double end = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const double issued = static_cast<double>(i + 1) * launch_s;
    end = std::max(end, issued) + (bandwidth > 0 ? static_cast<double>(bytes[i]) / bandwidth : 0);
  }
  return end;
}

namespace {
std::vector<uint64_t> shard_bytes_of(const WriterTensors& t) {
  std::vector<uint64_t> out(t.class_of_rank.size());
  for (size_t r = 0; r < out.size(); ++r) {
    if (!t.class_of_rank[r]) continue;
    for (uint64_t b : t.by_class.at(*t.class_of_rank[r])) out[r] += b;
  }
  return out;
}
}  // namespace

std::vector<uint64_t> checkpoint_shard_bytes(const Scenario& s) {
  return shard_bytes_of(writer_tensors(s));
}

CheckpointCost checkpoint_cost(const Scenario& s, double step_time_s) {
  const TrainingCheckpointOptions& o = s.training.checkpoint;
  FULLSHARD_CHECK(o.every > 0, "checkpoint_cost without training.checkpoint.every");
  CheckpointCost c;
  c.every = o.every;
  c.mode = o.mode;
  c.d2h_bandwidth = s.hardware.device.pageable_copy_bandwidth;
  c.storage_write_bandwidth = o.storage_write_bandwidth;
  c.launch_s = s.hardware.device.eager_dispatch_s + s.hardware.device.launch_overhead_s;
  const WriterTensors tensors = writer_tensors(s);
  c.shard_bytes = shard_bytes_of(tensors);
  for (const auto& [k, bytes] : tensors.by_class)
    c.d2h_s = std::max(c.d2h_s, checkpoint_copy_seconds(bytes, c.d2h_bandwidth, c.launch_s));
  const int per_node = std::max(1, s.hardware.gpus_per_node);
  std::map<int, uint64_t> node;
  uint64_t largest = 0;
  for (size_t r = 0; r < c.shard_bytes.size(); ++r) {
    node[static_cast<int>(r) / per_node] += c.shard_bytes[r];
    largest = std::max(largest, c.shard_bytes[r]);
  }
  for (const auto& [n, b] : node) c.node_bytes = std::max(c.node_bytes, b);
  c.write_s = static_cast<double>(c.node_bytes) / c.storage_write_bandwidth;
  if (c.mode == CheckpointSaveMode::kAsync) {
    const double late = std::max(0.0, c.write_s - c.every * step_time_s);
    c.exposed_s = c.d2h_s + late;
    c.hidden_s = c.write_s - late;
    c.host_staging_bytes = largest;
  } else {
    c.exposed_s = c.d2h_s + c.write_s;
  }
  c.amortised_s_per_step = c.exposed_s / c.every;
  c.saves = s.training.steps / c.every;
  return c;
}

nlohmann::json checkpoint_cost_json(const CheckpointCost& c) {
  uint64_t largest = 0;
  for (uint64_t b : c.shard_bytes) largest = std::max(largest, b);
  nlohmann::json played = nlohmann::json::array();
  for (const auto& p : c.played)
    played.push_back({{"after_step", p.step},
                      {"begin_s", p.begin_s},
                      {"exposed_s", p.exposed_s()},
                      {"write_begin_s", p.write_begin_s},
                      {"write_end_s", p.write_end_s}});
  return {{"every", c.every},
          {"mode", checkpoint_save_mode_name(c.mode)},
          {"d2h_bandwidth", c.d2h_bandwidth},
          {"storage_write_bandwidth", c.storage_write_bandwidth},
          {"shard_bytes_per_rank", largest},
          {"node_bytes", c.node_bytes},
          {"d2h_s", c.d2h_s},
          {"write_s", c.write_s},
          {"exposed_s", c.exposed_s},
          {"hidden_s", c.hidden_s},
          {"amortised_s_per_step", c.amortised_s_per_step},
          {"host_staging_bytes", c.host_staging_bytes},
          {"saves", c.saves},
          {"played", played},
          {"played_final_wait_s", c.played_final_wait_s}};
}

}  // namespace fullshard::sim
