#pragma once
// Which transport a rank's collectives use on the CUDA backend (option `collectives`):
// NCCL (the default), or Gloo over pinned host staging buffers (staged_gloo_process_group.h),
// which lets several ranks share one GPU in tests: NCCL refuses two ranks on one device
// ("Duplicate GPU detected").
#include <optional>
#include <string>
#include <string_view>

namespace fullshard::cuda {

enum class CollectiveTransport { kNccl, kGloo };

const char* transport_name(CollectiveTransport t);  // "nccl", "gloo"
// "nccl" or "gloo"; anything else throws InputError naming `where`.
CollectiveTransport parse_transport(std::string_view text, const std::string& where);

struct TransportChoice {
  CollectiveTransport transport = CollectiveTransport::kNccl;
  std::string reason;  // one line, for the run log
};

// `requested`: what the user asked for (nullopt: default). Gloo is forced when more local
// ranks than visible GPUs share the machine; asking for NCCL then is an InputError naming
// `where`, the counts and the fix.
TransportChoice choose_transport(std::optional<CollectiveTransport> requested, int local_world_size,
                                 int visible_gpus, const std::string& where);

}  // namespace fullshard::cuda
