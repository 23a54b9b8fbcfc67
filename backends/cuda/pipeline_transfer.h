#pragma once
// Pipeline stage handoffs on the CUDA backend, the host-side part (no CUDA or NCCL call;
// host-testable): which end of a channel this rank is, and the order its channels' NCCL
// communicators are created in.
//
// NOTE [Pipeline p2p on the CUDA backend]: a pipeline channel's transfer (NOTE [Pipeline p2p] in
// core/train/pipeline_p2p.h: a broadcast from group rank 0 over [sender, receiver]) runs as
// ProcessGroupNCCL's send / recv: ncclSend on the sender, ncclRecv on the receiver, on the stream
// the program issued it on (a send on the peer's p2p stream, kPipelineP2P / kPipelineP2PPrev; a
// recv on the compute stream or, where the lowered schedule posts it, on the p2p stream). Each
// channel has an NCCL communicator of its own, as the simulator keeps channels apart (NOTE
// [Pipeline channels] in simulator/sim_backend.h): NCCL serialises a communicator's work (NOTE
// [NCCL serialises a communicator]), so an activation and a gradient crossing between the same
// two ranks on one communicator could wait on each other; on separate ones each transfer waits
// only for its own peer. A communicator's creation blocks until both members arrive, so a rank
// creates all of its channels at its first transfer, in one order every rank agrees on
// (pipeline_channel_order: by name, then ranks): the smallest channel not yet made has both
// members waiting on it, so creation always progresses. Ranks sharing a GPU run the same
// transfer as a staged Gloo broadcast over the channel's own group (one per channel whatever the
// stream, as the CPU backend's channels: NOTE [Pipeline sends and recvs on the CPU]).
#include <string>
#include <vector>

#include "backends/common/collective_args.h"
#include "core/mesh/device_mesh.h"

namespace fullshard::cuda {

// One end of a channel's transfer: this rank sends (group rank 0) or receives (group rank 1),
// `peer` the other end's group rank.
struct PipelineTransfer {
  bool send = false;
  int peer = 0;
};
// InternalError naming the transfer unless `args` is a broadcast from group rank 0 over a
// channel of two distinct ranks that contains `global_rank`.
PipelineTransfer pipeline_transfer(const backends::CollectiveArgs& args,
                                   const ProcessGroup& channel, int global_rank);

// The key of a channel's process group (its name and ranks; the stream does not enter).
std::string pipeline_channel_key(const ProcessGroup& channel);

// `channels` (a rank's pipeline channels, core/train/pipeline_program.h pipeline_p2p_groups),
// less those without `global_rank` and duplicates, in creation order: by name, then ranks.
std::vector<ProcessGroup> pipeline_channel_order(std::vector<ProcessGroup> channels,
                                                 int global_rank);

}  // namespace fullshard::cuda
