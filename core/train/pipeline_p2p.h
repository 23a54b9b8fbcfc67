#pragma once
// Stage-to-stage activations and gradients of pipeline parallelism as point-to-point transfers.
//
// NOTE [Pipeline p2p]: PyTorch's PipelineStage sends a stage's output to the next stage's rank
// and the input gradient back (dist.batch_isend_irecv; torch/distributed/pipelining/stage.py in
// PyTorch 2.11). Here a transfer is a collective of two ranks, a broadcast from the sender into
// the receiver's buffer (what a send / recv pair moves), on its own channel: one process group per
// stage boundary and direction, named "pipeline p2p F 0->1" or "pipeline p2p B 1->0" (NOTE
// [Pipeline channels] in simulator/sim_backend.h), each carrying one stage's microbatches in order
// on both ranks. A send runs on the StreamRole::kPipelineP2P stream after the compute that made
// its tensor (ProcessGroupNCCL runs p2p work on a stream of its own per pair of ranks, so one
// for the next pp rank, kPipelineP2P, and one for the previous, kPipelineP2PPrev, where that is
// another rank: pipeline_p2p_stream); the sent tensor stays alive
// until the current stream has waited for it: before the next send on the same channel under
// 1F1B (its `_wait_batch_p2p(send_work)` before firing the next), at the step's end under the
// others (GPipe's and the multi-stage runtimes' `send_ops` are waited after the last action).
// Under GPipe and 1F1B (their own `_step_microbatches`) a recv runs on the current stream right
// before the action that reads it, as `_wait_batch_p2p` there makes the compute wait. The
// multi-stage schedules (`_PipelineScheduleRuntime`) issue sends and recvs where the lowered
// schedule puts them (NOTE [Lowered send and recv order] in core/pipeline/pipeline_lowering.h):
// both on the peer's p2p stream in that order, each recv waited by the action that reads it.
// A recv posted early holds back that stream's later sends, as an NCCL recv does its stream.
#include <map>
#include <string>
#include <vector>

#include "core/mesh/device_mesh.h"
#include "core/runtime/backend_storage.h"

namespace fullshard {

// The channel of stage `from_stage` -> `to_stage` ('F': activations, 'B': gradients) between
// global ranks `from_rank` and `to_rank`: the process group [from_rank, to_rank].
ProcessGroup pipeline_channel(char kind, int from_stage, int to_stage, int from_rank, int to_rank);

// The p2p stream for peer `peer` of the pp rank `pp_rank` in a pp group of `pp` ranks (group
// indices): kPipelineP2P for the next rank (pp_rank + 1 mod pp), kPipelineP2PPrev otherwise.
inline StreamRole pipeline_p2p_stream(int pp_rank, int peer, int pp) {
  return peer == (pp_rank + 1) % pp ? StreamRole::kPipelineP2P : StreamRole::kPipelineP2PPrev;
}

// Whether `g` is such a channel (a real backend runs its broadcast as a send and a recv).
inline bool is_pipeline_channel(const ProcessGroup& g) {
  return g.name.rfind("pipeline p2p", 0) == 0;
}

// Receives into `buffer` on the current stream (the sender is group rank 0).
void pipeline_recv(Backend& b, const Tensor& buffer, const ProcessGroup& channel, int microbatch);
// Posts a receive into `buffer` on the p2p stream `stream` (the peer's), after the current stream's work (NCCL's
// stream waits for the current one); returns its event, which the reading action waits for
// (NOTE [Lowered send and recv order] in core/pipeline/pipeline_lowering.h).
uint64_t pipeline_post_recv(Backend& b, StreamRole stream, const Tensor& buffer,
                            const ProcessGroup& channel, int microbatch);

// The sends of one rank, each kept until the current stream waited for it.
class PipelineSends {
 public:
  // `wait_previous`: a send first waits for the channel's previous one (1F1B).
  PipelineSends(Backend& b, bool wait_previous) : b_(b), wait_previous_(wait_previous) {}
  // Sends `t` on the p2p stream `stream` (the peer's; after the channel's previous send with
  // wait_previous).
  void send(StreamRole stream, const Tensor& t, const ProcessGroup& channel, int microbatch);
  // The current stream waits for every send still pending; their tensors are released.
  void wait_all();

 private:
  struct Pending {
    Tensor tensor;
    uint64_t event = 0;
  };
  Backend& b_;
  bool wait_previous_;
  std::multimap<std::string, Pending> pending_;  // by channel name, in issue order
  void wait(Pending& p);
};

}  // namespace fullshard
