#include "backends/cpu/cpu_communicator.h"

#include <cstring>
#include <utility>

#include "backends/common/collective_args.h"
#include "backends/gloo/rendezvous.h"
#include "core/common/error.h"
#include "core/train/pipeline_p2p.h"

namespace fullshard::cpu {

CpuCommunicator::CpuCommunicator(const Backend& host, CpuDevice& streams,
                                 std::shared_ptr<::gloo::rendezvous::Store> store,
                                 std::shared_ptr<::gloo::transport::Device> device,
                                 std::string hostname, gloo_backend::ProcessGroupOptions options)
    : host_(host),
      streams_(streams),
      store_(std::move(store)),
      device_(std::move(device)),
      hostname_(std::move(hostname)),
      options_(std::move(options)) {}

// NOTE [One TCP device per stream]: each stream's groups and pipeline channels connect through a
// Gloo TCP device of their own (the compute stream through the one the backend was given). A
// device moves the bytes of all its pairs on one event-loop thread, so with one device the
// streams' transfers (an all-gather beside a reduce-scatter) would take turns on it; one device
// per stream lets them progress at once. The groups themselves are
// built concurrently on their streams' threads (NOTE [Rendezvous outside the lock]); the store
// they rendezvous through allows that (NOTE [FileStore across threads] in
// backends/gloo/rendezvous.h).
std::shared_ptr<::gloo::transport::Device> CpuCommunicator::device_for(StreamRole r) {
  std::lock_guard<std::mutex> lock(groups_mu_);
  if (!device_ || r == StreamRole::kDefault) return device_;
  auto& d = stream_devices_[r];
  if (!d) d = gloo_backend::make_tcp_device(hostname_);
  return d;
}

// NOTE [Rendezvous outside the lock]: a group's first collective on a stream rendezvouses with
// the other ranks, which blocks until they reach the same (group, stream). Holding groups_mu_
// meanwhile would let two streams deadlock across ranks: rank 0's copy-in stream waits for rank
// 1's copy-in stream (the float8 all-gather's amax all-reduce) while rank 1's copy-in stream
// waits on the mutex its all-gather stream holds, rendezvousing for an all-gather that rank 0's
// all-gather stream cannot reach (it waits on the mutex too). The lock guards only the map; each
// entry is built once (std::call_once), by the first thread that needs it.
backends::GlooCollectiveGroup& CpuCommunicator::process_group(const ProcessGroup& g, StreamRole r) {
  const std::string key = std::string(stream_name(r)) + "/" + g.key();
  std::shared_ptr<::gloo::transport::Device> device = device_for(r);
  std::shared_ptr<LazyGroup> entry;
  {
    std::lock_guard<std::mutex> lock(groups_mu_);
    auto& slot = groups_[key];
    if (!slot) slot = std::make_shared<LazyGroup>();
    entry = slot;
  }
  std::call_once(entry->once, [&] {
    FULLSHARD_CHECK(g.size() == 1 || (store_ && device),
                    "a collective over several ranks needs a rendezvous store and a device");
    // A one-rank group exchanges nothing and has no store (a one-rank job); wrapping a null
    // store in a PrefixStore would bind a reference to it.
    auto store = store_ ? gloo_backend::make_prefix_store(key, store_) : nullptr;
    entry->pg =
        std::make_unique<backends::GlooCollectiveGroup>(store, device, g, host_.rank(), options_);
  });
  return *entry->pg;
}

// NOTE [Pipeline sends and recvs on the CPU]: a pipeline channel's transfer (NOTE [Pipeline p2p]
// in core/train/pipeline_p2p.h: a broadcast from group rank 0 over [sender, receiver]) runs as
// Gloo's send on the sender and recv on the receiver (NOTE [Gloo send / recv] in
// backends/gloo/process_group.h), each on the stream the program issued it on (a send on the
// peer's p2p stream; a recv on the compute stream under GPipe and 1F1B, on the peer's p2p stream
// where the lowered schedule posts it), as the simulator plays them. The two ends may run on
// different streams, so a channel has one GlooProcessGroup of its own, which one stream per
// rank uses (a channel has one direction). The n-th transfer the host issues on a channel is
// tagged n on both ranks, so each send meets its recv. The stream's first transfer constructs
// the group (the two ranks' rendezvous) without holding any lock: a rank's other channels and
// streams go on meanwhile (a lock held there could wait on a peer that waits on this rank).
void CpuCommunicator::send_or_recv(StreamRole r, const backends::CollectivePlan& plan,
                                   const ProcessGroup& group) {
  const backends::CollectiveArgs& a = plan.args;
  FULLSHARD_CHECK(a.kind == CollectiveKind::kBroadcast && group.size() == 2 && a.root == 0 &&
                      group.ranks[0] != group.ranks[1],
                  "pipeline transfer '" + a.name + "' is not a broadcast from group rank 0 of two");
  const std::string key = "p2p/" + group.name + "/" + group.key();
  auto& ch = channels_[key];
  if (!ch) ch = std::make_shared<Channel>(Channel{r, 0, nullptr});
  FULLSHARD_CHECK(ch->stream == r, "pipeline channel '" + group.name + "' used from two streams");
  FULLSHARD_CHECK(store_ && device_, "a pipeline transfer needs a rendezvous store and a device");
  const uint64_t tag = ch->next_tag++;
  const bool sends = group.index_of(host_.rank()) == 0;
  std::shared_ptr<::gloo::transport::Device> device = device_for(r);
  streams_.stream(r).enqueue([this, r, a, group, key, ch, tag, sends, device,
                              seq = host_.host_seq(), starts = host_.memory().records_timeline()] {
    if (!ch->pg)
      ch->pg = std::make_unique<gloo_backend::GlooProcessGroup>(
          gloo_backend::make_prefix_store(key, store_), device, group, host_.rank(), options_);
    streams_.run_timed(
        r, seq, starts,
        [&] {
          if (sends)
            ch->pg->send(a.output, a.count, a.dtype, 1, tag, a.name);
          else
            ch->pg->recv(a.output, a.count, a.dtype, 0, tag, a.name);
        },
        &group.name);
  });
}

void CpuCommunicator::collective(StreamRole r, const CollectiveCall& call,
                                 const ProcessGroup& group) {
  streams_.check_failed();
  // NOTE [One collective decoding] (backends/common/collective_args.h)
  const backends::CollectivePlan plan = backends::plan_collective(
      call, group, host_.rank(), streams_.resolve(call.input), streams_.resolve(call.output));
  if (is_pipeline_channel(group)) {
    send_or_recv(r, plan, group);
    return;
  }
  streams_.stream(r).enqueue(
      [this, r, plan, group, seq = host_.host_seq(), starts = host_.memory().records_timeline()] {
        auto& pg = process_group(group, r);
        streams_.run_timed(
            r, seq, starts,
            [&] {
              if (plan.copy_bytes > 0)
                std::memcpy(plan.args.output, plan.copy_from, plan.copy_bytes);
              pg.run(plan.args, backends::CallingThread{});
            },
            &group.name);
      });
}

}  // namespace fullshard::cpu
