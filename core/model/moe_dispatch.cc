#include "core/model/moe_dispatch.h"

#include <algorithm>
#include <cmath>

#include "core/model/op_util.h"
#include "core/model/ops.h"
#include "core/runtime/eager_args.h"

namespace fullshard {

int64_t max_receive_rows(int64_t tokens, int64_t top_k, int64_t experts, int ep,
                         int64_t capacity) {
  FULLSHARD_CHECK(ep >= 1 && experts % ep == 0, "max_receive_rows: ep must divide the experts");
  const int64_t local = experts / ep;
  return ep * std::min(tokens * std::min(top_k, local), local * std::min(capacity, tokens));
}

}  // namespace fullshard

namespace fullshard::ops::moe {

using detail::kCompute;
using detail::make_op;
using detail::result;

std::vector<int64_t> read_counts(Backend& b, const Tensor& counts, const std::string& name) {
  std::vector<float> v(static_cast<size_t>(counts.numel()));
  b.copy_to_host(counts.ref(), v.data());
  std::vector<int64_t> out;
  for (float x : v) {
    FULLSHARD_CHECK(x >= 0 && x == std::floor(x), name + ": token count " + std::to_string(x) +
                                                       " is not a whole count");
    out.push_back(static_cast<int64_t>(x));
  }
  return out;
}

namespace {

void issue_all_to_all(Backend& b, const Tensor& in, const Tensor& out,
                      const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows,
                      int64_t width, const ProcessGroup& group, const std::string& name) {
  CollectiveCall call;
  call.kind = CollectiveKind::kAllToAll;
  call.name = name;
  call.input = in.ref();
  call.output = out.ref();
  for (int64_t r : send_rows) call.send_numels.push_back(r * width);
  for (int64_t r : recv_rows) call.recv_numels.push_back(r * width);
  b.collective(kCompute, call, group);
}

int64_t sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// x.view(ep, -1).sum(dim=1).to("cpu"): the device sum, its copy into host memory (pinned for
// non_blocking=True, as PyTorch's D2H .to does). The device sum is freed on return; the host
// copy is returned, alive until the caller's .tolist() after the sync.
Tensor splits_to_host(ExecContext& c, const Tensor& counts, int ep, const std::string& name) {
  Backend& b = c.backend();
  const int64_t per = counts.numel() / ep;
  Tensor s = c.empty({DType::kFloat32, {ep}}, MemCategory::kTemporary, name);
  OpCall op = make_op(OpKind::kSumLastDim, name, {counts.ref()}, {s.ref()},
                      static_cast<double>(counts.numel()));
  RowArgs{per, ep}.encode(op);
  c.launch(op);
  Buffer hb = b.allocate_host(s.nbytes(), MemCategory::kTemporary, name + " (cpu)");
  Tensor host = adopt_buffer(b, hb, s.meta());
  copy_into(b, kCompute, host, s, name + " .to(cpu)");
  return host;
}

}  // namespace

SplitSizes exchange_split_sizes(ExecContext& c, const Tensor& tokens_per_expert,
                                const ExpertParallel& ep, std::vector<int64_t> assumed_send,
                                std::vector<int64_t> assumed_recv, const std::string& name) {
  Backend& b = c.backend();
  FULLSHARD_CHECK(ep.enabled() && tokens_per_expert.numel() % ep.degree == 0,
                  name + ": experts must split over ep");
  const int64_t per = tokens_per_expert.numel() / ep.degree;
  Tensor group_counts = c.empty(tokens_per_expert.meta(), MemCategory::kActivation,
                                name + " num_tokens_per_expert_group");
  const std::vector<int64_t> equal(static_cast<size_t>(ep.degree), 1);
  issue_all_to_all(b, tokens_per_expert, group_counts, equal, equal, per, ep.group,
                   name + " all_to_all (split sizes)");
  Tensor in_splits = splits_to_host(c, tokens_per_expert, ep.degree, name + " input_splits");
  Tensor out_splits = splits_to_host(c, group_counts, ep.degree, name + " output_splits");
  b.synchronize(b.record_event(kCompute));  // .to("cpu", non_blocking=False), then .tolist()
  SplitSizes s{group_counts, std::move(assumed_send), std::move(assumed_recv)};
  if (b.has_data()) {  // the router's counts, as .tolist() reads them
    s.send_rows = read_counts(b, in_splits, name + " input_splits");
    s.recv_rows = read_counts(b, out_splits, name + " output_splits");
  }
  return s;  // the host copies go with this scope, after the sync
}

Value all_to_all(ExecContext& c, Value x, const std::vector<int64_t>& send_rows,
                 const std::vector<int64_t>& recv_rows, int64_t out_rows,
                 const ProcessGroup& group, const std::string& name) {
  Backend& b = c.backend();
  int64_t width = 1;  // a rank that receives no token has 0 rows: never divide by them
  for (size_t d = 1; d < x.t.shape().size(); ++d) width *= x.t.shape()[d];
  FULLSHARD_CHECK(static_cast<int>(send_rows.size()) == group.size() &&
                      static_cast<int>(recv_rows.size()) == group.size() &&
                      sum(send_rows) * width <= x.t.numel() && sum(recv_rows) <= out_rows,
                  name + ": split sizes do not fit the buffers or the group");
  Tensor y = c.empty({x.t.dtype(), {out_rows, width}}, MemCategory::kActivation, name);
  issue_all_to_all(b, x.t, y, send_rows, recv_rows, width, group, name + " all_to_all");
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    const TensorMeta in_meta = x.t.meta();
    c.record(Node{name,
                  {x.id},
                  {out.id},
                  [&b, in_meta, send_rows, recv_rows, width, group, name](std::vector<Tensor>& g) {
                    Tensor gx = empty_tensor(b, in_meta, MemCategory::kTemporary, kCompute,
                                              name + " grad_input");
                    issue_all_to_all(b, g[0], gx, recv_rows, send_rows, width, group,
                                     name + " all_to_all backward");
                    return std::vector<Tensor>{gx};
                  }});
  }
  return out;
}

}  // namespace fullshard::ops::moe
