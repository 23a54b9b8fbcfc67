#include "core/runtime/stream.h"

namespace fullshard {

std::string_view stream_name(StreamRole r) {
  switch (r) {
    case StreamRole::kDefault: return "compute";
    case StreamRole::kAllGatherCopyIn: return "all_gather_copy_in";
    case StreamRole::kAllGather: return "all_gather";
    case StreamRole::kReduceScatter: return "reduce_scatter";
    case StreamRole::kAllReduce: return "all_reduce";
    case StreamRole::kHostToDevice: return "host_to_device";
    case StreamRole::kDeviceToHost: return "device_to_host";
    case StreamRole::kPipelineP2P: return "pipeline_p2p";
    case StreamRole::kPipelineP2PPrev: return "pipeline_p2p_prev";
    case StreamRole::kContextParallel: return "context_parallel";
  }
  return "?";
}

}  // namespace fullshard
