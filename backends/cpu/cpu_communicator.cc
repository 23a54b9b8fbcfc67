#include "backends/cpu/cpu_communicator.h"

#include <cstring>
#include <utility>

#include "backends/common/collective_args.h"
#include "backends/gloo/rendezvous.h"
#include "core/common/error.h"

namespace fullshard::cpu {

CpuCommunicator::CpuCommunicator(const Backend& host, CpuDevice& streams,
                                 std::shared_ptr<::gloo::rendezvous::Store> store,
                                 std::shared_ptr<::gloo::transport::Device> device,
                                 gloo_backend::ProcessGroupOptions options)
    : host_(host),
      streams_(streams),
      store_(std::move(store)),
      device_(std::move(device)),
      options_(std::move(options)) {}

// NOTE [Rendezvous outside the lock]: a group's first collective on a stream rendezvouses with
// the other ranks, which blocks until they reach the same (group, stream). Holding groups_mu_
// meanwhile would let two streams deadlock across ranks: rank 0's copy-in stream waits for rank
// 1's copy-in stream (the float8 all-gather's amax all-reduce) while rank 1's copy-in stream
// waits on the mutex its all-gather stream holds, rendezvousing for an all-gather that rank 0's
// all-gather stream cannot reach (it waits on the mutex too). The lock guards only the map; each
// entry is built once (std::call_once), by the first thread that needs it.
backends::GlooCollectiveGroup& CpuCommunicator::process_group(const ProcessGroup& g, StreamRole r) {
  const std::string key = std::string(stream_name(r)) + "/" + g.key();
  std::shared_ptr<LazyGroup> entry;
  {
    std::lock_guard<std::mutex> lock(groups_mu_);
    auto& slot = groups_[key];
    if (!slot) slot = std::make_shared<LazyGroup>();
    entry = slot;
  }
  std::call_once(entry->once, [&] {
    FULLSHARD_CHECK(g.size() == 1 || (store_ && device_),
                    "a collective over several ranks needs a rendezvous store and a device");
    // A one-rank group exchanges nothing and has no store (a one-rank job); wrapping a null
    // store in a PrefixStore would bind a reference to it.
    auto store = store_ ? gloo_backend::make_prefix_store(key, store_) : nullptr;
    entry->pg =
        std::make_unique<backends::GlooCollectiveGroup>(store, device_, g, host_.rank(), options_);
  });
  return *entry->pg;
}

void CpuCommunicator::collective(StreamRole r, const CollectiveCall& call,
                                 const ProcessGroup& group) {
  streams_.check_failed();
  // NOTE [One collective decoding] (backends/common/collective_args.h)
  const backends::CollectivePlan plan = backends::plan_collective(
      call, group, host_.rank(), streams_.resolve(call.input), streams_.resolve(call.output));
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
