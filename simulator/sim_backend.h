#pragma once
// The simulator's Backend: buffers carry no data; every launch, collective, event and
// allocation is recorded into the rank's Program in host order, with the allocator's
// exact block (NOTE [Allocation in host order] in core/runtime/backend.h). Its parts (NOTE
// [Backend parts]): SimDevice records, SimCommunicator records over the GroupRegistry, no probe.
#include <string>
#include <string_view>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/runtime/backend.h"
#include "simulator/engine/program.h"

namespace fullshard::sim {

// Interns process groups by their rank list so every rank's programs refer to the same ids
// (in order of first use). Keyed by the rank list itself: no string is built per collective.
// NOTE [Expert-parallel communicators]: torchtitan's sparse mesh ("ep", "efsdp") is unflattened
// from the world on its own, so its process groups are communicators of their own even where
// their ranks equal a dense group's (ep = the shard size): such groups are interned apart, so
// the engine's per-communicator order does not queue an all-to-all behind FSDP's collectives.
// So is the "cp" group: DeviceMesh makes it apart from the flattened dp_shard_cp group FSDP
// uses, which has the same ranks when dp_shard is 1 (ring attention's exchanges would otherwise
// wait for FSDP's all-gathers, and be counted as the shard dim's).
class GroupRegistry {
 public:
  uint32_t intern(const ProcessGroup& g);
  const std::vector<GroupInfo>& groups() const { return groups_; }

 private:
  struct RanksHash {
    size_t operator()(const std::vector<int>& ranks) const;
  };
  std::unordered_map<std::vector<int>, uint32_t, RanksHash> by_ranks_;
  // NOTE [Pipeline channels]: pipeline parallelism's point-to-point groups (named "pipeline
  // p2p ...", core/train/pipeline_p2p.h) are one channel per stage boundary and direction, so two
  // with the same ranks stay apart: each carries its stage's microbatches in order on both
  // ranks, as PyTorch pairs every send with its recv.
  std::map<std::pair<std::string, std::vector<int>>, uint32_t> by_channel_;
  std::unordered_map<std::vector<int>, uint32_t, RanksHash> ep_by_ranks_, efsdp_by_ranks_,
      cp_by_ranks_;
  std::vector<GroupInfo> groups_;
};

// The simulator's device part (NOTE [Backend parts] in core/runtime/backend.h): every launch,
// event, marker and allocation goes into the rank's Program, which the engine plays.
class SimDevice : public Device {
 public:
  // `host`: the Backend this device records for (rank, host_seq, step); it outlives the device.
  explicit SimDevice(const Backend& host);

  void launch(StreamRole stream, const OpCall& op) override;
  EventId record_event(StreamRole stream) override;
  void wait_event(StreamRole stream, EventId event) override;
  void synchronize(EventId event) override;
  void annotate(std::string_view label) override;
  void fsdp_hook(std::string_view what, int params) override;
  void on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) override;
  void on_free(const Buffer& buffer) override;

  // NOTE [Playing a checkpoint save] (simulator/checkpoint_play.h): a storage write.
  EventId storage_write(std::string_view name, uint64_t bytes, uint64_t node_bytes);

  // ---- for SimCommunicator and SimBackend ----
  Program& program() { return program_; }
  const Program& program() const { return program_; }
  uint32_t name(std::string_view s);
  Instr& push(InstrType type, StreamRole stream);
  void add_accesses(Instr& in, const std::vector<TensorRef>& reads,
                    const std::vector<TensorRef>& writes);

 private:
  const Backend& host_;
  Program program_;
  EventId next_event_ = 0;
  // Name -> id (NOTE [Name lookup] in sim_backend.cc): open addressing over a power of two of
  // slots holding a name's hash and id + 1 (0: empty); the name itself is program_.names[id].
  struct NameSlot {
    uint64_t hash = 0;
    uint32_t id1 = 0;
  };
  std::vector<NameSlot> name_slots_;
  std::unordered_set<uint64_t> host_buffers_;  // live buffers in host memory (CPU offload)

  KernelPlace place_of(const OpCall& op) const;
};

// The simulator's communicator part: each collective recorded into the device's Program over
// the group's id in the shared GroupRegistry.
class SimCommunicator : public Communicator {
 public:
  // `host`, `device` and `groups` outlive the communicator.
  SimCommunicator(const Backend& host, SimDevice& device, GroupRegistry& groups)
      : host_(host), device_(device), groups_(groups) {}
  void collective(StreamRole stream, const CollectiveCall& call,
                  const ProcessGroup& group) override;

 private:
  const Backend& host_;
  SimDevice& device_;
  GroupRegistry& groups_;
};

class SimBackend : public Backend {
 public:
  SimBackend(int rank, int world_size, AllocatorOptions allocator, GroupRegistry& groups,
             bool record_timeline = true);

  Program& program() { return device_.program(); }
  const Program& program() const { return device_.program(); }
  // Stops recording (the host program died, e.g. out of memory).
  void truncate() { device_.program().truncated = true; }

  // A checkpoint save's work (NOTE [Playing a checkpoint save] in simulator/checkpoint_play.h).
  // A device-to-host copy into pageable host memory (DCP's CPU tensors): launched as `op`
  // (a kCopy), priced at the pageable copy bandwidth (KernelPlace::kDeviceToPageableHost).
  void launch_pageable_copy(StreamRole stream, const OpCall& op);
  // The rank's writer thread writes `bytes` to storage while its node writes `node_bytes` in
  // all (InstrType::kStorageWrite); returns the event a synchronize waits on for its end.
  EventId storage_write(std::string_view name, uint64_t bytes, uint64_t node_bytes) {
    return device_.storage_write(name, bytes, node_bytes);
  }

 private:
  SimDevice device_;
  SimCommunicator communicator_;
};

}  // namespace fullshard::sim
