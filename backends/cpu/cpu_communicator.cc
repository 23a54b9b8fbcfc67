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

backends::GlooCollectiveGroup& CpuCommunicator::process_group(const ProcessGroup& g, StreamRole r) {
  const std::string key = std::string(stream_name(r)) + "/" + g.key();
  std::lock_guard<std::mutex> lock(groups_mu_);
  auto it = groups_.find(key);
  if (it != groups_.end()) return *it->second;
  FULLSHARD_CHECK(g.size() == 1 || (store_ && device_),
                  "a collective over several ranks needs a rendezvous store and a device");
  // A one-rank group exchanges nothing and has no store (a one-rank job); wrapping a null
  // store in a PrefixStore would bind a reference to it.
  auto store = store_ ? gloo_backend::make_prefix_store(key, store_) : nullptr;
  auto pg =
      std::make_unique<backends::GlooCollectiveGroup>(store, device_, g, host_.rank(), options_);
  return *groups_.emplace(key, std::move(pg)).first->second;
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
