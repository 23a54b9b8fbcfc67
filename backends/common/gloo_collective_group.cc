#include "backends/common/gloo_collective_group.h"

#include <utility>

namespace fullshard::backends {

GlooCollectiveGroup::GlooCollectiveGroup(std::shared_ptr<::gloo::rendezvous::Store> store,
                                         std::shared_ptr<::gloo::transport::Device> device,
                                         const ProcessGroup& group, int global_rank,
                                         gloo_backend::ProcessGroupOptions options)
    : pg_(std::move(store), std::move(device), group, global_rank, std::move(options)) {}

void GlooCollectiveGroup::run(const CollectiveArgs& a, CallingThread) {
  switch (a.kind) {
    case CollectiveKind::kAllGather:
      pg_.all_gather(a.input, a.output, a.count, a.dtype, a.name);
      break;
    case CollectiveKind::kReduceScatter:
      pg_.reduce_scatter(a.input, a.output, a.count, a.dtype, a.op, a.scale, a.name);
      break;
    case CollectiveKind::kAllReduce:
      pg_.all_reduce(a.output, a.count, a.dtype, a.op, a.scale, a.name);
      break;
    case CollectiveKind::kBroadcast:
      pg_.broadcast(a.output, a.count, a.dtype, a.root, a.name);
      break;
    case CollectiveKind::kBarrier: pg_.barrier(a.name); break;
    case CollectiveKind::kAllToAll:
      pg_.all_to_all(a.input, a.send_counts, a.output, a.recv_counts, a.dtype, a.name);
      break;
  }
}

}  // namespace fullshard::backends
