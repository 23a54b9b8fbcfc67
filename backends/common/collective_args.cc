#include "backends/common/collective_args.h"

#include "core/common/error.h"

namespace fullshard::backends {

namespace {
size_t total(const std::vector<size_t>& v) {
  size_t s = 0;
  for (size_t x : v) s += x;
  return s;
}
}  // namespace

size_t CollectiveArgs::input_bytes(int group_size) const {
  const size_t e = dtype_size(dtype);
  switch (kind) {
    case CollectiveKind::kAllGather: return count * e;
    case CollectiveKind::kReduceScatter: return count * e * static_cast<size_t>(group_size);
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBroadcast: return count * e;
    case CollectiveKind::kBarrier: return 0;
    case CollectiveKind::kAllToAll: return total(send_counts) * e;
  }
  return 0;
}

size_t CollectiveArgs::output_bytes(int group_size) const {
  const size_t e = dtype_size(dtype);
  switch (kind) {
    case CollectiveKind::kAllGather: return count * e * static_cast<size_t>(group_size);
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBroadcast: return count * e;
    case CollectiveKind::kBarrier: return 0;
    case CollectiveKind::kAllToAll: return total(recv_counts) * e;
  }
  return 0;
}

gloo_backend::CallInfo CollectiveArgs::info() const {
  gloo_backend::CallInfo c;
  c.kind = kind;
  c.count = count;
  c.dtype = dtype;
  c.has_op = kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllReduce;
  c.op = op;
  c.root = kind == CollectiveKind::kBroadcast ? root : -1;
  c.name = name;
  return c;
}

CollectiveArgs decode_collective(const CollectiveCall& call, const void* input, void* output,
                                 int group_size) {
  FULLSHARD_CHECK(group_size >= 1, "collective " + call.name + " over an empty group");
  CollectiveArgs a;
  a.kind = call.kind;
  a.dtype = call.output.meta.dtype;
  a.op = call.op;
  a.scale = call.scale;
  a.root = call.root;
  a.name = call.name;
  a.input = input;
  a.output = output;
  const auto in_n = static_cast<size_t>(call.input.meta.numel());
  const auto out_n = static_cast<size_t>(call.output.meta.numel());
  const auto w = static_cast<size_t>(group_size);
  const std::string what = std::string(collective_name(call.kind)) + " '" + call.name + "'";
  if (call.kind != CollectiveKind::kBarrier)
    FULLSHARD_CHECK(call.input.meta.dtype == call.output.meta.dtype,
                    what + ": input and output dtypes differ");
  switch (call.kind) {
    case CollectiveKind::kAllGather:
      FULLSHARD_CHECK(out_n == in_n * w, what + ": output must hold group size x input elements");
      a.count = in_n;
      break;
    case CollectiveKind::kReduceScatter:
      FULLSHARD_CHECK(in_n == out_n * w, what + ": input must hold group size x output elements");
      a.count = out_n;
      break;
    case CollectiveKind::kAllReduce:
      FULLSHARD_CHECK(in_n == out_n, what + ": input and output sizes differ");
      a.count = out_n;
      break;
    case CollectiveKind::kBroadcast:
      FULLSHARD_CHECK(call.root >= 0 && call.root < group_size, what + ": root outside the group");
      a.count = out_n;
      break;
    case CollectiveKind::kBarrier: a.count = 0; break;
    case CollectiveKind::kAllToAll: {
      FULLSHARD_CHECK(call.send_numels.size() == w && call.recv_numels.size() == w,
                      what + ": needs one send and one receive count per group rank");
      int64_t sent = 0, received = 0;
      for (size_t j = 0; j < w; ++j) {
        FULLSHARD_CHECK(call.send_numels[j] >= 0 && call.recv_numels[j] >= 0,
                        what + ": negative split size");
        sent += call.send_numels[j];
        received += call.recv_numels[j];
        a.send_counts.push_back(static_cast<size_t>(call.send_numels[j]));
        a.recv_counts.push_back(static_cast<size_t>(call.recv_numels[j]));
      }
      // The splits fill a prefix of each buffer (max receive buffers: NOTE [Receive buffers]).
      FULLSHARD_CHECK(static_cast<size_t>(sent) <= in_n && static_cast<size_t>(received) <= out_n,
                      what + ": split sizes add up to more than the input or output holds");
      a.count = in_n;
      break;
    }
  }
  return a;
}

CollectivePlan plan_collective(const CollectiveCall& call, const ProcessGroup& group, int rank,
                               const void* input, void* output) {
  FULLSHARD_CHECK(group.index_of(rank) >= 0,
                  "collective " + call.name + " on a group without this rank");
  CollectivePlan p;
  const bool copy_first = call.kind == CollectiveKind::kAllReduce && input != output;
  if (copy_first) {
    p.copy_from = input;
    p.copy_bytes = call.output.nbytes();
  }
  p.args = decode_collective(call, copy_first ? output : input, output, group.size());
  return p;
}

}  // namespace fullshard::backends
