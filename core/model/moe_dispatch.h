#pragma once
// Expert parallelism's token dispatch and combine (torchtitan's ExpertParallel._token_dispatch
// and _token_combine, torchtitan/distributed/expert_parallel.py at pytorch/torchtitan@36a4b69):
// the split sizes exchanged first, read back to the host, then all-to-all-v of the tokens, and
// the reverse in the combine; autograd runs the all-to-all of the gradients the other way.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/mesh/device_mesh.h"
#include "core/model/autograd.h"
#include "core/model/moe_routing_record.h"

namespace fullshard {

// This rank's view of the ep mesh dim (MeshInfo::ep_group; core/mesh/expert_mesh.h).
struct ExpertParallel {
  int degree = 1;  // 1: no expert parallelism
  int index = 0;   // this rank's coordinate along ep (it holds experts [index E/ep, ...))
  ProcessGroup group;
  // expert_parallel.receive_buffers "max" (NOTE [Receive buffers] in core/scenario/scenario.h):
  // the dispatch output holds the most this rank can receive, whatever the routing.
  bool max_receive = false;
  // The router's record (a backend with data) or replay (the simulator) of every MoE layer call,
  // with ep = 1 too (NOTE [Recorded routing] in moe_routing_record.h); null: the routing
  // assumption, nothing recorded.
  std::shared_ptr<RoutingTape> routing;
  bool enabled() const { return degree > 1; }
};

// The most rows an ep rank can receive: each of the ep members' `tokens` picks `top_k` distinct
// experts, at most min(top_k, experts / ep) of them on this rank, and each of its experts keeps
// at most `capacity` of a member's tokens (NOTE [Capacity factor] in moe_routing.h; dropless:
// `tokens`).
int64_t max_receive_rows(int64_t tokens, int64_t top_k, int64_t experts, int ep,
                         int64_t capacity);

namespace ops::moe {

// .tolist() of fp32 token counts on a backend with data (host split sizes, or a device
// histogram read back for NOTE [Recorded routing]): whole, non-negative counts, or an internal
// error naming `name`.
std::vector<int64_t> read_counts(Backend& b, const Tensor& counts, const std::string& name);

// NOTE [Split sizes exchanged first]: _token_dispatch runs, under no_grad,
//   num_tokens_per_expert_group = all_to_all_single(num_tokens_per_expert)  ([E] fp32, equal
//     splits: E / ep counts to each ep rank), wait_tensor;
//   input_splits = num_tokens_per_expert.view(ep, -1).sum(1).to("cpu", non_blocking=True);
//   output_splits = num_tokens_per_expert_group.view(ep, -1).sum(1).to("cpu",
//     non_blocking=False)   <- the device-to-host sync: the host waits for the compute stream;
//   .tolist() of both.
// Each .sum(1) is an [ep] fp32 device tensor freed once copied; the host copies are freed after
// .tolist(). On a backend with data the split sizes are read from the host copies, as .tolist()
// reads them; on the simulator (no data) they are the routing assumption's `assumed_send` /
// `assumed_recv` (core/model/moe_routing.h).
struct SplitSizes {
  Tensor group_counts;  // num_tokens_per_expert_group [E], the received counts, sender-major
  std::vector<int64_t> send_rows, recv_rows;  // input_splits, output_splits
};
SplitSizes exchange_split_sizes(ExecContext& c, const Tensor& tokens_per_expert,
                                const ExpertParallel& ep, std::vector<int64_t> assumed_send,
                                std::vector<int64_t> assumed_recv, const std::string& name);

// all_to_all_single_autograd(x, output_split_sizes=recv_rows, input_split_sizes=send_rows,
// group): x [rows >= sum(send_rows), W] -> [out_rows, W], a new tensor from the compute
// stream's pool, run on the compute stream (a functional collective waited on at once). The
// splits fill a prefix of each buffer: out_rows is sum(recv_rows) as PyTorch sizes it, or more
// with max receive buffers. The node saves nothing; its backward is the all-to-all of the
// gradient with the splits swapped, into a buffer shaped as x.
Value all_to_all(ExecContext& c, Value x, const std::vector<int64_t>& send_rows,
                 const std::vector<int64_t>& recv_rows, int64_t out_rows,
                 const ProcessGroup& group, const std::string& name);

}  // namespace ops::moe
}  // namespace fullshard
