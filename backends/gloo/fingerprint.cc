#include "backends/gloo/fingerprint.h"

#include <algorithm>
#include <cstring>

namespace fullshard::gloo_backend {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

std::string describe(const CallInfo& call) {
  std::string s = call.p2p.empty() ? std::string(collective_name(call.kind)) : call.p2p;
  s += " '" + call.name + "'";
  if (!call.p2p.empty())
    return s + " (" + std::to_string(call.count) + " x " + std::string(dtype_name(call.dtype)) +
           (call.p2p == "send" ? ", to member " : ", from member ") + std::to_string(call.root) +
           ", tag " + std::to_string(call.tag) + ")";
  if (call.kind == CollectiveKind::kBarrier) return s;
  s += " (" + std::to_string(call.count) + " x " + std::string(dtype_name(call.dtype));
  if (call.has_op) s += std::string(", ") + reduce_op_name(call.op);
  if (call.kind == CollectiveKind::kBroadcast) s += ", root " + std::to_string(call.root);
  s += ")";
  return s;
}

Fingerprint make_fingerprint(const CallInfo& call) {
  Fingerprint fp;
  fp.kind = static_cast<uint8_t>(call.kind);
  fp.dtype = static_cast<uint8_t>(call.dtype);
  fp.has_op = call.has_op ? 1 : 0;
  fp.op = call.has_op ? static_cast<uint8_t>(call.op) : 0;
  fp.root = call.root;
  fp.count = call.count;
  fp.name_hash = fnv1a(call.name);
  const size_t n = std::min(call.name.size(), sizeof(fp.name));
  std::memcpy(fp.name, call.name.data(), n);
  fp.truncated = call.name.size() > sizeof(fp.name) ? 1 : 0;
  return fp;
}

CallInfo from_fingerprint(const Fingerprint& fp) {
  CallInfo c;
  c.kind = static_cast<CollectiveKind>(fp.kind);
  c.dtype = static_cast<DType>(fp.dtype);
  c.has_op = fp.has_op != 0;
  c.op = static_cast<ReduceOp>(fp.op);
  c.root = fp.root;
  c.count = fp.count;
  const size_t n = strnlen(fp.name, sizeof(fp.name));
  c.name.assign(fp.name, n);
  // A cut name: its hash still tells the calls apart.
  if (fp.truncated) c.name += "...";
  return c;
}

bool same_call(const Fingerprint& a, const Fingerprint& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.op == b.op && a.has_op == b.has_op &&
         a.root == b.root && a.count == b.count && a.name_hash == b.name_hash;
}

int first_mismatch(const std::vector<Fingerprint>& all) {
  for (size_t i = 1; i < all.size(); ++i)
    if (!same_call(all[0], all[i])) return static_cast<int>(i);
  return -1;
}

}  // namespace fullshard::gloo_backend
