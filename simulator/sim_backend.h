#pragma once
// The simulator's Backend: buffers carry no data; every launch, collective, event and
// allocation is recorded into the rank's Program in host order, with the allocator's
// exact block (NOTE [Allocation in host order] in core/runtime/backend.h).
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/runtime/backend.h"
#include "simulator/engine/program.h"

namespace fullshard::sim {

// Interns process groups by their rank list so every rank's programs refer to the same ids
// (in order of first use). Keyed by the rank list itself: no string is built per collective.
class GroupRegistry {
 public:
  uint32_t intern(const ProcessGroup& g);
  const std::vector<GroupInfo>& groups() const { return groups_; }

 private:
  struct RanksHash {
    size_t operator()(const std::vector<int>& ranks) const;
  };
  std::unordered_map<std::vector<int>, uint32_t, RanksHash> by_ranks_;
  std::vector<GroupInfo> groups_;
};

class SimBackend : public Backend {
 public:
  SimBackend(int rank, int world_size, AllocatorOptions allocator, GroupRegistry& groups,
             bool record_timeline = true);

  Program& program() { return program_; }
  const Program& program() const { return program_; }
  // Stops recording (the host program died, e.g. out of memory).
  void truncate() { program_.truncated = true; }

  // A checkpoint save's work (NOTE [Playing a checkpoint save] in simulator/checkpoint_play.h).
  // A device-to-host copy into pageable host memory (DCP's CPU tensors): launched as `op`
  // (a kCopy), priced at the pageable copy bandwidth (KernelPlace::kDeviceToPageableHost).
  void launch_pageable_copy(StreamRole stream, const OpCall& op);
  // The rank's writer thread writes `bytes` to storage while its node writes `node_bytes` in
  // all (InstrType::kStorageWrite); returns the event a synchronize waits on for its end.
  EventId storage_write(std::string_view name, uint64_t bytes, uint64_t node_bytes);

 protected:
  void do_launch(StreamRole stream, const OpCall& op) override;
  void do_collective(StreamRole stream, const CollectiveCall& call,
                     const ProcessGroup& group) override;
  EventId do_record_event(StreamRole stream) override;
  void do_wait_event(StreamRole stream, EventId event) override;
  void do_synchronize(EventId event) override;
  void do_annotate(std::string_view label) override;
  void do_fsdp_hook(std::string_view what, int params) override;
  void on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) override;
  void on_free(const Buffer& buffer) override;

 private:
  GroupRegistry& groups_;
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

  uint32_t name(std::string_view s);
  Instr& push(InstrType type, StreamRole stream);
  void add_accesses(Instr& in, const std::vector<TensorRef>& reads,
                    const std::vector<TensorRef>& writes);
  KernelPlace place_of(const OpCall& op) const;
};

}  // namespace fullshard::sim
