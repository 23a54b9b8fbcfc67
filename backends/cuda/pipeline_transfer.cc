#include "backends/cuda/pipeline_transfer.h"

#include <algorithm>

#include "core/common/error.h"

namespace fullshard::cuda {

PipelineTransfer pipeline_transfer(const backends::CollectiveArgs& args,
                                   const ProcessGroup& channel, int global_rank) {
  const int me = channel.index_of(global_rank);
  FULLSHARD_CHECK(args.kind == CollectiveKind::kBroadcast && args.root == 0 &&
                      channel.size() == 2 && channel.ranks[0] != channel.ranks[1] && me >= 0,
                  "pipeline transfer '" + args.name + "' on channel '" + channel.name +
                      "' is not a broadcast from group rank 0 of two ranks with rank " +
                      std::to_string(global_rank));
  return PipelineTransfer{me == 0, 1 - me};
}

std::string pipeline_channel_key(const ProcessGroup& channel) {
  return "p2p/" + channel.name + "/" + channel.key();
}

std::vector<ProcessGroup> pipeline_channel_order(std::vector<ProcessGroup> channels,
                                                 int global_rank) {
  std::erase_if(channels, [&](const ProcessGroup& g) { return g.index_of(global_rank) < 0; });
  auto less = [](const ProcessGroup& a, const ProcessGroup& b) {
    return a.name != b.name ? a.name < b.name : a.ranks < b.ranks;
  };
  std::sort(channels.begin(), channels.end(), less);
  channels.erase(std::unique(channels.begin(), channels.end(),
                             [](const ProcessGroup& a, const ProcessGroup& b) {
                               return a.name == b.name && a.ranks == b.ranks;
                             }),
                 channels.end());
  return channels;
}

}  // namespace fullshard::cuda
