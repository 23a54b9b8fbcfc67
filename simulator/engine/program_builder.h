#pragma once
// Builds a sim::Program by hand, for tests, benchmarks and examples; the recording backend
// produces the same structure from a real host program. Every method appends one
// instruction in host order and returns *this:
//
//   ProgramBuilder b(/*rank=*/0);
//   b.alloc(1, StreamRole::kAllGather, "ag out")
//    .collective(StreamRole::kAllGather, "ag", CollectiveKind::kAllGather, 0, 1 << 20, {}, {1})
//    .record(StreamRole::kAllGather, 7)
//    .wait(StreamRole::kDefault, 7)
//    .kernel(StreamRole::kDefault, "mm", {1}, {2}, /*flops=*/1e9);
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "simulator/engine/program.h"

namespace fullshard::sim {

class ProgramBuilder {
 public:
  explicit ProgramBuilder(int rank = 0) {
    program_.rank = rank;
    program_.names.emplace_back();  // name 0: unnamed (records, waits, syncs)
  }

  // Step stamped on the instructions that follow.
  ProgramBuilder& at_step(int step) {
    step_ = step;
    return *this;
  }

  ProgramBuilder& kernel(StreamRole stream, std::string_view name,
                         const std::vector<uint64_t>& reads = {},
                         const std::vector<uint64_t>& writes = {}, double flops = 0,
                         double bytes = 0, OpKind op = OpKind::kLinear) {
    Instr& in = push(InstrType::kKernel, stream, intern(name));
    in.op = op;
    in.flops = flops;
    in.bytes = bytes;
    add_accesses(in, reads, writes);
    return *this;
  }

  ProgramBuilder& collective(StreamRole stream, std::string_view name, CollectiveKind kind,
                             uint32_t group, uint64_t coll_bytes,
                             const std::vector<uint64_t>& reads = {},
                             const std::vector<uint64_t>& writes = {},
                             DType dtype = DType::kBFloat16, ReduceOp reduce = ReduceOp::kSum) {
    Instr& in = push(InstrType::kCollective, stream, intern(name));
    in.coll = kind;
    in.group = group;
    in.coll_bytes = coll_bytes;
    in.dtype = dtype;
    in.reduce = reduce;
    add_accesses(in, reads, writes);
    return *this;
  }

  ProgramBuilder& record(StreamRole stream, EventId event) {
    push(InstrType::kRecordEvent, stream, 0).event = event;
    return *this;
  }
  ProgramBuilder& wait(StreamRole stream, EventId event) {
    push(InstrType::kWaitEvent, stream, 0).event = event;
    return *this;
  }
  // The host blocks until `event` completes; event 0 waits for every stream (device sync).
  ProgramBuilder& sync(EventId event) {
    push(InstrType::kSynchronize, StreamRole::kDefault, 0).event = event;
    return *this;
  }

  // `pool`: the stream whose allocator pool the buffer comes from (ignored for host memory).
  ProgramBuilder& alloc(uint64_t buffer, StreamRole pool, std::string_view name,
                        bool on_host = false) {
    const uint32_t n = intern(name);
    buffer_names_[buffer] = n;
    Instr& in = push(InstrType::kAlloc, pool, n);
    in.buffer = buffer;
    in.on_host = on_host;
    return *this;
  }
  ProgramBuilder& free(uint64_t buffer) {
    auto it = buffer_names_.find(buffer);
    push(InstrType::kFree, StreamRole::kDefault, it == buffer_names_.end() ? 0 : it->second)
        .buffer = buffer;
    return *this;
  }

  ProgramBuilder& marker(std::string_view label) {
    push(InstrType::kMarker, StreamRole::kDefault, intern(label));
    return *this;
  }

  uint32_t intern(std::string_view name) {
    auto [it, inserted] =
        name_ids_.try_emplace(std::string(name), static_cast<uint32_t>(program_.names.size()));
    if (inserted) program_.names.emplace_back(name);
    return it->second;
  }

  size_t size() const { return program_.instrs.size(); }
  const Program& program() const { return program_; }
  Program build() { return std::move(program_); }

 private:
  Instr& push(InstrType type, StreamRole stream, uint32_t name) {
    Instr& in = program_.instrs.emplace_back();
    in.type = type;
    in.stream = stream;
    in.step = step_;
    in.name = name;
    in.host_seq = program_.instrs.size();
    return in;
  }

  void add_accesses(Instr& in, const std::vector<uint64_t>& reads,
                    const std::vector<uint64_t>& writes) {
    in.access_begin = static_cast<uint32_t>(program_.accesses.size());
    for (uint64_t b : reads) program_.accesses.push_back({b, false});
    for (uint64_t b : writes) program_.accesses.push_back({b, true});
    in.access_count = static_cast<uint32_t>(reads.size() + writes.size());
  }

  Program program_;
  int step_ = 0;
  std::unordered_map<std::string, uint32_t> name_ids_{{"", 0}};
  std::unordered_map<uint64_t, uint32_t> buffer_names_;
};

}  // namespace fullshard::sim
