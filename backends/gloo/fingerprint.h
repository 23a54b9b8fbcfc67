#pragma once
// What one member says it is about to run: the debug-mode check (ProcessGroupOptions::
// check_fingerprints) exchanges these before every collective, as TORCH_DISTRIBUTED_DEBUG=DETAIL
// does, and fails with both descriptions when members disagree.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/runtime/op.h"
#include "core/tensor/dtype.h"

namespace fullshard::gloo_backend {

// One collective call, as the process group sees it; also what error messages describe.
struct CallInfo {
  CollectiveKind kind = CollectiveKind::kBarrier;
  uint64_t count = 0;  // all_gather / reduce_scatter: per-rank elements; else the buffer's
  DType dtype = DType::kUInt8;
  bool has_op = false;  // reduce_scatter / all_reduce
  ReduceOp op = ReduceOp::kSum;
  int root = -1;  // broadcast: group rank of the root; send / recv: the peer's
  std::string name;
  // "send" or "recv" for a point-to-point transfer (NOTE [Gloo send / recv]), with its tag;
  // empty for a collective.
  std::string p2p;
  uint64_t tag = 0;
};

// "reduce_scatter 'layers.0' (1024 x bf16, avg)", "broadcast 'x' (8 x fp32, root 1)",
// "barrier 'sync'", "send 'x' (8 x fp32, to member 1, tag 3)".
std::string describe(const CallInfo& call);

// Fixed-size wire form: 64 bytes, no pointers, the same layout in every member (same binary).
struct Fingerprint {
  uint8_t kind = 0;
  uint8_t dtype = 0;
  uint8_t op = 0;
  uint8_t has_op = 0;
  int32_t root = -1;
  uint64_t count = 0;
  uint64_t name_hash = 0;  // FNV-1a over the whole name
  char name[39] = {};      // the name's first 39 bytes, NUL-padded (for messages)
  uint8_t truncated = 0;   // the name was longer than `name`
};
static_assert(sizeof(Fingerprint) == 64, "Fingerprint is sent raw");

Fingerprint make_fingerprint(const CallInfo& call);
// The call a fingerprint stands for (a name cut to 39 bytes ends with "...").
CallInfo from_fingerprint(const Fingerprint& fp);
bool same_call(const Fingerprint& a, const Fingerprint& b);

// Group index of the first member whose fingerprint differs from member 0's; -1 when all agree.
int first_mismatch(const std::vector<Fingerprint>& all);

}  // namespace fullshard::gloo_backend
