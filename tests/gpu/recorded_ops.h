#pragma once
// The ops a scenario's host program launches, as OpCalls with their operands: the simulator's
// parts (which record the same host program every backend runs, NOTE [Backend entry points]
// in core/runtime/backend.h) with each launch kept. Used by the host test of the kernels' operand
// contracts (cuda_op_contract_test.cc) and the GPU test of every GEMM shape the models use
// (cuda_gemm_shapes_test.cc): op lists derived from the model, not written by hand.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/scenario/scenario.h"
#include "core/train/training_program.h"
#include "simulator/sim_backend.h"

namespace recorded_ops {

using namespace fullshard;

// The simulator's parts (NOTE [Backend parts] in core/runtime/backend.h) with a device that
// also keeps each launch.
class RecordingDevice : public sim::SimDevice {
 public:
  using sim::SimDevice::SimDevice;
  std::vector<OpCall> ops;
  void launch(StreamRole stream, const OpCall& op) override {
    ops.push_back(op);
    sim::SimDevice::launch(stream, op);
  }
};

class RecordingBackend : public Backend {
 public:
  RecordingBackend(const Scenario& s, int rank, sim::GroupRegistry& groups)
      : Backend(rank, s.world_size(), s.hardware.allocator, nullptr, /*record_timeline=*/false),
        device_(*this),
        communicator_(*this, device_, groups) {
    attach(device_, communicator_);
  }
  std::vector<OpCall>& ops() { return device_.ops; }

 private:
  RecordingDevice device_;
  sim::SimCommunicator communicator_;
};

// Every op `rank` launches in `steps` training steps of `s` (model build and sharding included).
inline std::vector<OpCall> record(const Scenario& s, int rank = 0, int steps = 1) {
  sim::GroupRegistry groups;
  RecordingBackend b(s, rank, groups);
  {
    TrainingProgram prog(b, s);
    for (int step = 0; step < steps; ++step) prog.run_step(step);
  }
  return std::move(b.ops());
}

// A small scenario around `model` (a name or a model object) as the coverage test builds them:
// batch 2, seq 32, one step, on an H100 profile; `mesh` {dp} or {dp_shard, tp}; `extra` merged in.
inline nlohmann::json scenario_json(const nlohmann::json& model,
                                    const nlohmann::json& implementation,
                                    const std::vector<int>& mesh,
                                    const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json m = model.is_string() ? nlohmann::json{{"name", model}} : model;
  if (!implementation.is_null()) m["implementation"] = implementation;
  int world = 1;
  for (int d : mesh) world *= d;
  nlohmann::json j = {
      {"name", "recorded"},
      {"model", m},
      {"training",
       {{"batch_per_rank", 2},
        {"seq_len", 32},
        {"steps", 1},
        {"optimizer", {{"max_grad_norm", 1.0}}}}},
      {"fsdp", {{"mesh", {{"shape", mesh}}}}},
      {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", world}}}};
  if (mesh.size() == 2) j["fsdp"]["mesh"]["dim_names"] = {"dp_shard", "tp"};
  for (auto& [k, v] : extra.items()) {
    if (v.is_object() && j.contains(k)) {
      j[k].update(v, /*merge_objects=*/true);
    } else {
      j[k] = v;
    }
  }
  return j;
}

}  // namespace recorded_ops
