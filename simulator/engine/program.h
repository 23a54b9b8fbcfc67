#pragma once
// What one rank's host program issued, as the simulator recorded it: a flat list of
// instructions in host order. The event engine plays the programs of all ranks together.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/runtime/op.h"
#include "core/runtime/stream.h"

namespace fullshard::sim {

enum class InstrType : uint8_t {
  kKernel,       // a compute or copy kernel on `stream`
  kCollective,   // a collective on `stream` over group `group`
  kRecordEvent,  // stream records `event`
  kWaitEvent,    // stream waits for `event` (recorded earlier on this rank)
  kSynchronize,  // the host blocks until `event` completes
  kAlloc,        // host allocates `buffer` from `stream`'s pool (device) or host memory
  kFree,         // host frees `buffer`
  kMarker,       // annotation (phase / step boundary); no work
  // A write to storage by a host thread beside the host program (a checkpoint's writer,
  // NOTE [Playing a checkpoint save] in simulator/checkpoint_play.h): it runs on the rank's
  // checkpoint lane, one write at a time, from the moment the host reaches it; it completes
  // `event`, which a later kSynchronize may wait for. `bytes`: the rank's bytes; `coll_bytes`:
  // its node's bytes written at the same time (they share the node's storage bandwidth).
  kStorageWrite,
  // Host-only work of the host program between launches (FSDP2's Python hooks, NOTE [FSDP hook
  // host cost] in simulator/cost/hardware_cost_model.cc): the host's clock advances by the cost
  // model's host_work_seconds; no stream is involved. `parts`: the parameters the hook handles.
  kHostWork,
};

// Where a kernel runs (SimBackend classifies it by the memory its tensors live in): on the
// device, on the host CPU (an offloaded optimizer step), or as a copy over the host link.
// kDeviceToPageableHost: a copy into pageable host memory (a checkpoint's staging, as DCP copies
// into ordinary CPU tensors), at the pageable copy bandwidth whatever fsdp.cpu_offload says.
enum class KernelPlace : uint8_t {
  kDevice,
  kHost,
  kHostToDevice,
  kDeviceToHost,
  kDeviceToPageableHost
};

struct Access {
  uint64_t buffer = 0;
  bool write = false;
};

// NOTE [Instruction layout]: every rank's program is a vector of these (1,024 ranks x ~20,000
// instructions with every rank played), so the engine's speed is that of walking them: fields
// are ordered widest first so the struct packs into 128 bytes.
struct Instr {
  uint64_t event = 0;     // record / wait / synchronize
  uint64_t buffer = 0;    // alloc / free
  uint64_t address = 0;   // alloc: the caching allocator's block address (device)
  uint64_t size = 0;      // alloc: the block's rounded size (device)
  uint64_t host_seq = 0;  // Backend::host_seq() at issue (memory timeline key)
  // Kernel cost inputs (the engine's cost model turns them into time). For kHostToDevice /
  // kDeviceToHost copies (same-dtype, as FSDP2's offload issues them) bytes / 2 crosses the
  // host link. `dtype` is a kernel's first input's (else first output's) dtype.
  double flops = 0;
  double bytes = 0;
  // Kernel shape for the compute model (NOTE [Kernel shapes] in simulator/sim_backend.cc):
  // linear ops {M, K, N} of the forward product; attention {batch x heads, seq, head_dim};
  // zeros otherwise.
  std::array<int64_t, 3> dims{};
  uint64_t coll_bytes = 0;    // bytes of the full buffer: AG output / RS input / AR buffer
  int step = 0;               // training step, for messages
  uint32_t name = 0;          // index into Program::names (op / buffer / marker label)
  uint32_t access_begin = 0;  // kernels / collectives: [begin, begin+count) in accesses
  uint32_t access_count = 0;
  // Async TP's collective-matmuls (kAllGatherMatmul, kMatmulReduceScatter): the tp group's
  // size, the chunks the product is pipelined in (dims are one chunk's product). kHostWork:
  // the parameters an FSDP hook handles.
  int parts = 0;
  uint32_t group = 0;  // kCollective: index into World::groups
  OpKind op = OpKind::kFill;
  InstrType type = InstrType::kMarker;
  StreamRole stream = StreamRole::kDefault;
  bool on_host = false;  // alloc: host (CPU) memory
  KernelPlace place = KernelPlace::kDevice;
  // Its tensors convert dtypes element by element (NOTE [Converting kernels] in
  // simulator/cost/dtype_conversion.h): the cost model prices its bytes at its own efficiency.
  bool converts_dtype = false;
  // Collective description (kCollective only).
  CollectiveKind coll = CollectiveKind::kAllGather;
  ReduceOp reduce = ReduceOp::kSum;
  DType dtype = DType::kFloat32;  // collectives: the buffer's; kernels: see above
};
static_assert(sizeof(Instr) == 128, "NOTE [Instruction layout]");

// NOTE [Shared names]: with every rank played, the copies of a class's program (NOTE [Shared
// recording] in simulator/play_record.cc) share its name table instead of copying ~10,000
// strings per rank; appending to a shared table copies it first, so a program never sees
// another's later names. Read-only access is that of a std::vector<std::string>.
class NameTable {
 public:
  size_t size() const { return names_ ? names_->size() : 0; }
  bool empty() const { return size() == 0; }
  const std::string& operator[](size_t i) const { return (*names_)[i]; }
  const std::string& at(size_t i) const { return view().at(i); }
  const std::vector<std::string>& view() const;
  operator const std::vector<std::string>&() const { return view(); }  // NOLINT
  std::vector<std::string>::const_iterator begin() const { return view().begin(); }
  std::vector<std::string>::const_iterator end() const { return view().end(); }
  void emplace_back(std::string_view name = {});
  friend bool operator==(const NameTable& a, const NameTable& b) { return a.view() == b.view(); }

 private:
  std::shared_ptr<std::vector<std::string>> names_;
};

struct Program {
  int rank = 0;
  std::vector<Instr> instrs;
  std::vector<Access> accesses;
  NameTable names;  // NOTE [Shared names]
  // Set when the host program stopped early (e.g. out of memory): the instruction index.
  bool truncated = false;
};

// The process groups collectives refer to, shared by all ranks' programs.
// NOTE [Compute or communication]: for the compute / communication / exposed figures, a
// collective is communication whatever stream runs it (tensor parallelism issues its
// collectives on the compute stream, where they block the next kernel, so they are always
// exposed); any other op on the compute stream is compute; ops on the communication streams
// count as communication; the all-gather copy-in stream is neither.
enum class OpActivity : uint8_t { kCompute, kComm, kOther };
// A checkpoint's copies (kDeviceToPageableHost) are neither: they are the save's, not training's.
inline OpActivity op_activity(const Instr& in) {
  if (in.type == InstrType::kCollective) return OpActivity::kComm;
  if (in.place == KernelPlace::kDeviceToPageableHost) return OpActivity::kOther;
  if (in.stream == StreamRole::kDefault) return OpActivity::kCompute;
  return in.stream == StreamRole::kAllGatherCopyIn ? OpActivity::kOther : OpActivity::kComm;
}

struct GroupInfo {
  std::string name;        // "shard", "replicate", ...
  std::vector<int> ranks;  // global ranks in group order
};

}  // namespace fullshard::sim
