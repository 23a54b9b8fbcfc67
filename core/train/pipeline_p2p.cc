#include "core/train/pipeline_p2p.h"

#include <fmt/format.h>

#include "core/runtime/backend.h"

namespace fullshard {

ProcessGroup pipeline_channel(char kind, int from_stage, int to_stage, int from_rank, int to_rank) {
  return ProcessGroup{fmt::format("pipeline p2p {} {}->{}", kind, from_stage, to_stage),
                      {from_rank, to_rank}};
}

namespace {
// Both ranks name the transfer alike (NOTE [Collective matching] compares names).
void transfer(Backend& b, StreamRole stream, const Tensor& t, const ProcessGroup& channel,
              int microbatch) {
  CollectiveCall c;
  c.kind = CollectiveKind::kBroadcast;  // NOTE [Pipeline p2p]: group rank 0 sends
  c.root = 0;
  c.name = fmt::format("{} microbatch {}", channel.name, microbatch);
  c.input = t.ref();
  c.output = t.ref();
  b.collective(stream, c, channel);
}
}  // namespace

void pipeline_recv(Backend& b, const Tensor& buffer, const ProcessGroup& channel, int microbatch) {
  transfer(b, StreamRole::kDefault, buffer, channel, microbatch);
}

uint64_t pipeline_post_recv(Backend& b, StreamRole stream, const Tensor& buffer,
                            const ProcessGroup& channel, int microbatch) {
  b.wait_stream(stream, StreamRole::kDefault);
  transfer(b, stream, buffer, channel, microbatch);
  return b.record_event(stream);
}

void PipelineSends::wait(Pending& p) {
  b_.wait_event(StreamRole::kDefault, p.event);
  p.tensor = Tensor();
}

void PipelineSends::send(StreamRole stream, const Tensor& t, const ProcessGroup& channel,
                         int microbatch) {
  if (wait_previous_) {
    auto it = pending_.find(channel.name);
    if (it != pending_.end()) {
      wait(it->second);
      pending_.erase(it);
    }
  }
  b_.wait_stream(stream, StreamRole::kDefault);  // the tensor is computed
  transfer(b_, stream, t, channel, microbatch);
  pending_.emplace(channel.name, Pending{t, b_.record_event(stream)});
}

void PipelineSends::wait_all() {
  for (auto& [name, p] : pending_) wait(p);
  pending_.clear();
}

}  // namespace fullshard
