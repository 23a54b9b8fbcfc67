#include "simulator/sim_backend.h"

#include <unordered_map>

#include "core/common/error.h"
#include "core/runtime/attention_args.h"
#include "core/runtime/context_parallel_args.h"
#include "core/runtime/float8_args.h"
#include "core/runtime/layer_args.h"
#include "core/runtime/moe_args.h"
#include "core/runtime/op_table.h"
#include "simulator/cost/dtype_conversion.h"

namespace fullshard::sim {

size_t GroupRegistry::RanksHash::operator()(const std::vector<int>& ranks) const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the ranks
  for (int r : ranks) h = (h ^ static_cast<uint32_t>(r)) * 1099511628211ull;
  return static_cast<size_t>(h);
}

uint32_t GroupRegistry::intern(const ProcessGroup& g) {
  if (g.name.rfind("pipeline p2p", 0) == 0) {  // NOTE [Pipeline channels] (sim_backend.h)
    auto [c, added] = by_channel_.try_emplace({g.name, g.ranks}, 0);
    if (added) {
      c->second = static_cast<uint32_t>(groups_.size());
      groups_.push_back(GroupInfo{g.name, g.ranks});
    }
    return c->second;
  }
  // NOTE [Expert-parallel communicators] (sim_backend.h).
  auto& map = g.name == "ep"      ? ep_by_ranks_
              : g.name == "efsdp" ? efsdp_by_ranks_
              : g.name == "cp"    ? cp_by_ranks_
                                  : by_ranks_;
  auto it = map.find(g.ranks);
  if (it != map.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(groups_.size());
  groups_.push_back(GroupInfo{g.name, g.ranks});
  map.emplace(g.ranks, id);
  return id;
}

SimDevice::SimDevice(const Backend& host) : Device(/*has_data=*/false), host_(host) {
  program_.rank = host.rank();
}

SimBackend::SimBackend(int rank, int world_size, AllocatorOptions allocator, GroupRegistry& groups,
                       bool record_timeline)
    : Backend(rank, world_size, allocator, nullptr, record_timeline),
      device_(*this),
      communicator_(*this, device_, groups) {
  attach(device_, communicator_);
}

// NOTE [Name lookup]: every recorded op, allocation and marker interns its label (tens of
// thousands per program), so the lookup is one hash and, in the common case, one probe: slots
// are a power of two (no division), at most half full, each holding the hash beside the id so
// only a matching hash compares the string. Ids are given in order of first use, as before.
uint32_t SimDevice::name(std::string_view s) {
  const uint64_t h = std::hash<std::string_view>{}(s);
  if (name_slots_.empty()) name_slots_.resize(1024);
  size_t mask = name_slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    NameSlot& slot = name_slots_[i];
    if (slot.id1 == 0) break;
    if (slot.hash == h && program_.names[slot.id1 - 1] == s) return slot.id1 - 1;
  }
  const uint32_t id = static_cast<uint32_t>(program_.names.size());
  program_.names.emplace_back(s);
  if (2 * (static_cast<size_t>(id) + 1) > name_slots_.size()) {  // grow: re-place every name
    std::vector<NameSlot> old(name_slots_.size() * 2);
    old.swap(name_slots_);
    mask = name_slots_.size() - 1;
    for (const NameSlot& o : old) {
      if (o.id1 == 0) continue;
      size_t i = o.hash & mask;
      while (name_slots_[i].id1 != 0) i = (i + 1) & mask;
      name_slots_[i] = o;
    }
  }
  size_t i = h & mask;
  while (name_slots_[i].id1 != 0) i = (i + 1) & mask;
  name_slots_[i] = NameSlot{h, id + 1};
  return id;
}

Instr& SimDevice::push(InstrType type, StreamRole stream) {
  Instr in;
  in.type = type;
  in.stream = stream;
  in.step = host_.step();
  in.host_seq = host_.host_seq();  // ticked by Backend (NOTE [Backend entry points])
  program_.instrs.push_back(in);
  return program_.instrs.back();
}

void SimDevice::add_accesses(Instr& in, const std::vector<TensorRef>& reads,
                             const std::vector<TensorRef>& writes) {
  in.access_begin = static_cast<uint32_t>(program_.accesses.size());
  // One access per buffer per instruction; a write wins over a read. Foreach ops over every
  // parameter (clipping, the optimizer) have thousands of tensors: index them by buffer
  // rather than scanning (that was quadratic in the layers).
  const bool many = reads.size() + writes.size() > 16;
  std::unordered_map<uint64_t, uint32_t> seen;
  auto add = [&](const TensorRef& r, bool w) {
    if (r.buffer_id == 0) return;
    if (many) {
      auto [it, fresh] =
          seen.try_emplace(r.buffer_id, static_cast<uint32_t>(program_.accesses.size()));
      if (!fresh) {
        program_.accesses[it->second].write = program_.accesses[it->second].write || w;
        return;
      }
    } else {
      for (uint32_t k = in.access_begin; k < program_.accesses.size(); ++k)
        if (program_.accesses[k].buffer == r.buffer_id) {
          program_.accesses[k].write = program_.accesses[k].write || w;
          return;
        }
    }
    program_.accesses.push_back(Access{r.buffer_id, w});
  };
  for (const auto& r : reads) add(r, false);
  for (const auto& r : writes) add(r, true);
  in.access_count = static_cast<uint32_t>(program_.accesses.size()) - in.access_begin;
}

// NOTE [Kernel placement]: a kernel whose tensors all live in host memory is CPU work (the
// offloaded optimizer step, clipping and gradient accumulation on host gradients); a copy from
// host to device memory or back crosses the host link; everything else runs on the device.
KernelPlace SimDevice::place_of(const OpCall& op) const {
  if (host_buffers_.empty()) return KernelPlace::kDevice;
  auto count = [&](const std::vector<TensorRef>& refs, int& host, int& device) {
    for (const auto& r : refs) {
      if (r.buffer_id == 0) continue;
      ++(host_buffers_.count(r.buffer_id) ? host : device);
    }
  };
  int host_in = 0, dev_in = 0, host_out = 0, dev_out = 0;
  count(op.inputs, host_in, dev_in);
  count(op.outputs, host_out, dev_out);
  if (host_in + host_out == 0) return KernelPlace::kDevice;
  if (op.kind == OpKind::kCopy && dev_in == 0 && host_out == 0) return KernelPlace::kHostToDevice;
  if (op.kind == OpKind::kCopy && host_in == 0 && dev_out == 0) return KernelPlace::kDeviceToHost;
  return host_out > 0 ? KernelPlace::kHost : KernelPlace::kDevice;
}

// NOTE [Kernel shapes]: the shape the compute model prices, from the op's typed arguments
// (core/runtime/*_args.h, encoded by core/model): a linear's {M, K, N} (LinearArgs);
// attention's {batch * heads, seq, head_dim} (AttentionArgs); a collective-matmul's
// {M / tp, K, N} (CollectiveMatmulArgs); a ring-attention merge's eager kernel count
// (SdpaMergeArgs). An op recorded without them is priced without a shape.
namespace {
std::array<int64_t, 3> kernel_dims(const OpCall& op) {
  const size_t n = op.iargs.size();
  switch (op.kind) {
    case OpKind::kLinear:
    case OpKind::kLinearBackwardInput:
    case OpKind::kLinearBackwardWeight:
      if (n >= 3) {
        const LinearArgs l = LinearArgs::decode(op);
        return {l.m, l.k, l.n};
      }
      break;
    case OpKind::kScaledMM:  // torch._scaled_mm of a float8 linear: {M, K, N} (ScaledMmArgs)
    case OpKind::kScaledMMBackwardInput:
    case OpKind::kScaledMMBackwardWeight:
      if (n >= 3) {
        const ScaledMmArgs l = ScaledMmArgs::decode(op);
        return {l.m, l.k, l.n};
      }
      break;
    case OpKind::kAttention:
    case OpKind::kAttentionBackward:
    case OpKind::kAttentionEfficient:
    case OpKind::kAttentionEfficientBackward:
    case OpKind::kAttentionCudnn:
    case OpKind::kAttentionCudnnBackward:
      if (n >= 6) {
        const AttentionArgs a = AttentionArgs::decode(op);
        return {a.batch * a.heads, a.seq, a.head_dim};
      }
      break;
    case OpKind::kSdpaMerge:  // the eager merge's kernel count (NOTE [Ring attention op sequence])
      if (n >= 1) return {SdpaMergeArgs::decode(op).partial ? 10 : 8, 0, 0};
      break;
    case OpKind::kGroupedMM:  // one expert's group: {rows / experts, k, n}
    case OpKind::kGroupedMMBackwardInput:
    case OpKind::kGroupedMMBackwardWeight:
      if (n >= 5) {
        const GroupedMmArgs g = GroupedMmArgs::decode(op);
        return {g.computed_rows / g.experts, g.k, g.n};
      }
      break;
    case OpKind::kAllGatherMatmul:
    case OpKind::kMatmulReduceScatter:
      if (n >= 4) {
        const CollectiveMatmulArgs c = CollectiveMatmulArgs::decode(op);
        return {c.rows_per_rank, c.k, c.n};
      }
      break;
    default: break;
  }
  return {};
}
}  // namespace

void SimDevice::launch(StreamRole stream, const OpCall& op) {
  if (program_.truncated) return;
  uint32_t nm = name(op.name);
  const KernelPlace place = place_of(op);
  Instr& in = push(InstrType::kKernel, stream);
  in.name = nm;
  in.op = op.kind;
  in.place = place;
  if (!op.inputs.empty()) {
    in.dtype = op.inputs.front().meta.dtype;
  } else if (!op.outputs.empty()) {
    in.dtype = op.outputs.front().meta.dtype;
  }
  in.flops = op.flops;
  in.bytes = op.bytes;
  in.dims = kernel_dims(op);
  if ((op.kind == OpKind::kAllGatherMatmul || op.kind == OpKind::kMatmulReduceScatter) &&
      op.iargs.size() >= 4)
    in.parts = static_cast<int>(CollectiveMatmulArgs::decode(op).tp);
  in.converts_dtype = converts_dtype(op.inputs, op.outputs);
  add_accesses(in, op.inputs, op.outputs);
}

void SimBackend::launch_pageable_copy(StreamRole stream, const OpCall& op) {
  FULLSHARD_CHECK(op.kind == OpKind::kCopy, "launch_pageable_copy of a kernel that is no copy");
  const size_t before = device_.program().instrs.size();
  launch(stream, op);
  Program& program = device_.program();
  if (program.instrs.size() > before)
    program.instrs.back().place = KernelPlace::kDeviceToPageableHost;
}

EventId SimDevice::storage_write(std::string_view label, uint64_t bytes, uint64_t node_bytes) {
  const EventId e = ++next_event_;
  if (program_.truncated) return e;
  const uint32_t nm = name(label);
  Instr& in = push(InstrType::kStorageWrite, StreamRole::kDefault);
  in.name = nm;
  in.event = e;
  in.bytes = static_cast<double>(bytes);
  in.coll_bytes = node_bytes;
  return e;
}

void SimCommunicator::collective(StreamRole stream, const CollectiveCall& call,
                                 const ProcessGroup& group) {
  if (device_.program().truncated) return;
  FULLSHARD_CHECK(group.index_of(host_.rank()) >= 0, "collective on a group without this rank");
  uint32_t nm = device_.name(call.name);
  uint32_t gid = groups_.intern(group);
  Instr& in = device_.push(InstrType::kCollective, stream);
  in.name = nm;
  in.coll = call.kind;
  in.reduce = call.op;
  in.group = gid;
  in.dtype = call.output.meta.dtype;
  // The full buffer: the AG output, the RS input, the AR buffer.
  in.coll_bytes =
      call.kind == CollectiveKind::kReduceScatter ? call.input.nbytes() : call.output.nbytes();
  in.bytes = static_cast<double>(in.coll_bytes);
  if (call.kind == CollectiveKind::kAllToAll) {
    // This rank's input; dims: the bytes it sends to and receives from the other members (its
    // own chunk is a local copy), which the cost models price (NOTE [All-to-all cost]).
    const int me = group.index_of(host_.rank());
    const uint64_t es = dtype_size(call.input.meta.dtype);
    int64_t sent = 0, received = 0;  // a prefix of each buffer (NOTE [Receive buffers])
    for (int64_t n : call.send_numels) sent += n;
    for (int64_t n : call.recv_numels) received += n;
    in.coll_bytes = static_cast<uint64_t>(sent) * es;
    in.bytes = static_cast<double>((sent + received) * static_cast<int64_t>(es));
    FULLSHARD_CHECK(static_cast<int>(call.send_numels.size()) == group.size() &&
                        static_cast<int>(call.recv_numels.size()) == group.size(),
                    call.name + ": all_to_all split sizes do not match the group");
    int peers = 0;
    for (int j = 0; j < group.size(); ++j) {
      if (j == me) continue;
      in.dims[0] += call.send_numels[static_cast<size_t>(j)] * static_cast<int64_t>(es);
      in.dims[1] += call.recv_numels[static_cast<size_t>(j)] * static_cast<int64_t>(es);
      if (call.send_numels[static_cast<size_t>(j)] > 0) ++peers;
    }
    // A permute (one peer in a group of 3 or more; with 2 both models agree): dims[2] = 1
    // (NOTE [Permute cost] in simulator/cost/nccl_model.h).
    if (peers == 1 && group.size() > 2) in.dims[2] = 1;
  }
  if (call.kind == CollectiveKind::kAllGather)
    device_.add_accesses(in, {call.input}, {call.output});
  else
    device_.add_accesses(in, {call.input}, {call.output});
}

EventId SimDevice::record_event(StreamRole stream) {
  EventId e = ++next_event_;
  if (program_.truncated) return e;
  push(InstrType::kRecordEvent, stream).event = e;
  return e;
}

void SimDevice::wait_event(StreamRole stream, EventId event) {
  if (program_.truncated || event == 0) return;
  push(InstrType::kWaitEvent, stream).event = event;
}

void SimDevice::synchronize(EventId event) {
  if (program_.truncated || event == 0) return;
  push(InstrType::kSynchronize, StreamRole::kDefault).event = event;
}

void SimDevice::annotate(std::string_view label) {
  if (program_.truncated) return;
  uint32_t nm = name(label);
  push(InstrType::kMarker, StreamRole::kDefault).name = nm;
}

void SimDevice::fsdp_hook(std::string_view what, int params) {
  if (program_.truncated) return;
  uint32_t nm = name(what);
  Instr& in = push(InstrType::kHostWork, StreamRole::kDefault);
  in.name = nm;
  in.parts = params;
}

void SimDevice::on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) {
  if (program_.truncated) return;
  uint32_t nm = name(what);
  Instr in;
  in.type = InstrType::kAlloc;
  in.stream = stream;
  in.step = host_.step();
  in.host_seq = host_.host_seq();  // the allocation's own host_seq (already taken by allocate())
  in.name = nm;
  in.buffer = buffer.id;
  in.on_host = buffer.on_host;
  in.address = buffer.block.address;
  in.size = buffer.block.size;
  program_.instrs.push_back(in);
  if (buffer.on_host) host_buffers_.insert(buffer.id);
}

void SimDevice::on_free(const Buffer& buffer) {
  host_buffers_.erase(buffer.id);
  if (program_.truncated) return;
  Instr in;
  in.type = InstrType::kFree;
  in.step = host_.step();
  in.host_seq = host_.host_seq();
  in.buffer = buffer.id;
  in.on_host = buffer.on_host;
  program_.instrs.push_back(in);
}

}  // namespace fullshard::sim
