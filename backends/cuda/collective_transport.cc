#include "backends/cuda/collective_transport.h"

#include "core/common/error.h"

namespace fullshard::cuda {

const char* transport_name(CollectiveTransport t) {
  return t == CollectiveTransport::kNccl ? "nccl" : "gloo";
}

CollectiveTransport parse_transport(std::string_view text, const std::string& where) {
  if (text == "nccl") return CollectiveTransport::kNccl;
  if (text == "gloo") return CollectiveTransport::kGloo;
  throw InputError(where, "is '" + std::string(text) + "', not a collective transport",
                   "use 'nccl' (one GPU per rank) or 'gloo' (ranks may share a GPU)");
}

TransportChoice choose_transport(std::optional<CollectiveTransport> requested, int local_world_size,
                                 int visible_gpus, const std::string& where) {
  const bool shared = local_world_size > visible_gpus;
  const std::string counts = std::to_string(local_world_size) + " local ranks on " +
                             std::to_string(visible_gpus) + " visible GPU" +
                             (visible_gpus == 1 ? "" : "s");
  if (requested == CollectiveTransport::kNccl && shared)
    throw InputError(where,
                     "is 'nccl', but " + counts + " means ranks share a GPU, which NCCL refuses",
                     "use 'gloo' for GPU-sharing runs, or start at most one rank per GPU");
  if (requested)
    return {*requested, std::string("collectives: ") + transport_name(*requested) + " (requested)"};
  if (shared)
    return {CollectiveTransport::kGloo,
            "collectives: gloo (" + counts + "; NCCL needs one GPU per rank)"};
  return {CollectiveTransport::kNccl, "collectives: nccl (default)"};
}

}  // namespace fullshard::cuda
