#pragma once
#include <array>
#include <cstdint>
#include <string_view>

#include "core/memory/caching_allocator.h"

namespace fullshard {

// Streams by role, as FSDP2 names them (_fsdp_param_group.py FSDPCommContext) plus the
// copy streams CPU offload uses. Each role is one stream and one allocator pool.
enum class StreamRole : uint8_t {
  kDefault,          // "current stream": compute, AG copy-out, RS copy-in, optimizer
  kAllGatherCopyIn,  // all_gather_copy_in_stream
  kAllGather,        // all_gather_stream
  kReduceScatter,    // reduce_scatter_stream
  kAllReduce,        // all_reduce_stream (HSDP)
  kHostToDevice,     // offload H2D copies
  kDeviceToHost,     // offload D2H copies
  // Pipeline parallelism's stage-to-stage send / recv (ProcessGroupNCCL runs point-to-point
  // work on a stream of its own per pair of ranks; NOTE [Pipeline p2p] in
  // core/train/pipeline_p2p.h): the pair with the next pp rank, and with the previous one where
  // that is another rank (pp 3 or more).
  kPipelineP2P,
  kPipelineP2PPrev,
  // Context parallelism's K / V exchange (the cp process group's NCCL stream: ring attention's
  // all-gather or all-to-all overlaps the attention rounds; core/model/ring_attention.h).
  kContextParallel,
};
constexpr int kNumStreams = 10;
constexpr std::array<StreamRole, kNumStreams> kAllStreams = {
    StreamRole::kDefault,       StreamRole::kAllGatherCopyIn, StreamRole::kAllGather,
    StreamRole::kReduceScatter, StreamRole::kAllReduce,       StreamRole::kHostToDevice,
    StreamRole::kDeviceToHost,  StreamRole::kPipelineP2P,     StreamRole::kPipelineP2PPrev,
    StreamRole::kContextParallel};
// Streams only some programs use (pipeline or context parallelism): reports list them only
// when busy, so the reports of every other program stay as they were.
constexpr bool stream_is_optional(StreamRole r) {
  return r == StreamRole::kPipelineP2P || r == StreamRole::kPipelineP2PPrev ||
         r == StreamRole::kContextParallel;
}

constexpr StreamId stream_id(StreamRole r) { return static_cast<StreamId>(r); }
// "compute", "all_gather_copy_in", "all_gather", "reduce_scatter", "all_reduce",
// "host_to_device", "device_to_host", "pipeline_p2p", "context_parallel".
std::string_view stream_name(StreamRole r);

using EventId = uint64_t;  // 0 is "no event"

}  // namespace fullshard
