#include "backends/cuda/cuda_communicator.h"

#include <exception>
#include <utility>

#include "backends/common/collective_args.h"
#include "backends/cuda/nccl_process_group.h"
#include "backends/cuda/pipeline_transfer.h"
#include "backends/cuda/staged_gloo_process_group.h"
#include "backends/cuda/watchdog.h"
#include "backends/gloo/rendezvous.h"
#include "core/common/error.h"
#include "core/train/pipeline_p2p.h"

namespace fullshard::cuda {

CudaCommunicator::CudaCommunicator(const Backend& host, CudaDevice& device,
                                   CudaCommunicatorOptions options)
    : host_(host), device_(device), options_(std::move(options)) {}

CudaCommunicator::~CudaCommunicator() {
  close_staged();
  nccl_channels_.clear();
  nccl_groups_.clear();
}

void CudaCommunicator::close_staged() { gloo_groups_.clear(); }

std::shared_ptr<NcclProcessGroup> CudaCommunicator::nccl_group(const ProcessGroup& g) {
  // NOTE [Expert-parallel communicators] (simulator/sim_backend.h): the sparse mesh's groups and
  // the cp group are communicators of their own even where their ranks equal a dense group's, so
  // NCCL does not queue ring attention's exchanges (or an all-to-all) behind FSDP's collectives.
  const bool apart = g.name == "ep" || g.name == "efsdp" || g.name == "cp";
  const std::string key = apart ? g.name + "/" + g.key() : g.key();
  auto it = nccl_groups_.find(key);
  if (it != nccl_groups_.end()) return it->second;
  FULLSHARD_CHECK(g.size() == 1 || options_.store != nullptr,
                  "an NCCL group of several ranks needs a rendezvous store");
  NcclProcessGroupOptions no;
  no.timeout = options_.collectives.timeout;
  if (apart) no.instance = g.name;
  // Collective over the members: every member issues its first collective on `g` in the same
  // host-program position, so they construct it in the same order.
  auto pg = std::make_shared<NcclProcessGroup>(options_.store, g, host_.rank(), no);
  device_.watchdog().watch(pg);
  return nccl_groups_.emplace(key, std::move(pg)).first->second;
}

std::shared_ptr<NcclProcessGroup> CudaCommunicator::nccl_channel(const ProcessGroup& channel) {
  auto make = [&](const ProcessGroup& g) {
    FULLSHARD_CHECK(options_.store != nullptr, "a pipeline channel needs a rendezvous store");
    NcclProcessGroupOptions no;
    no.timeout = options_.collectives.timeout;
    no.instance = g.name;  // channels over the same two ranks are communicators of their own
    auto pg = std::make_shared<NcclProcessGroup>(options_.store, g, host_.rank(), no);
    device_.watchdog().watch(pg);
    nccl_channels_.emplace(pipeline_channel_key(g), pg);
  };
  // The first transfer creates every channel of this rank, in the order all ranks agree on.
  if (nccl_channels_.empty())
    for (const ProcessGroup& g : pipeline_channel_order(options_.pipeline_channels, host_.rank()))
      make(g);
  const std::string key = pipeline_channel_key(channel);
  if (!nccl_channels_.count(key)) make(channel);
  return nccl_channels_.at(key);
}

void CudaCommunicator::pipeline_transfer(StreamRole r, const CollectiveArgs& args,
                                         const ProcessGroup& channel) {
  const PipelineTransfer t = cuda::pipeline_transfer(args, channel, host_.rank());
  cudaStream_t s = device_.stream(r);
  if (options_.transport == CollectiveTransport::kGloo) {
    // A broadcast from the sender over the channel's own staged group, used from one stream.
    const std::string key = pipeline_channel_key(channel);
    auto [it, fresh] = channel_streams_.emplace(key, r);
    FULLSHARD_CHECK(fresh || it->second == r,
                    "pipeline channel '" + channel.name + "' used from two streams");
    DeviceProcessGroup& pg = staged_group(channel, r);
    device_.timed(r, &channel.name, [&] { pg.run(args, s); });
    return;
  }
  std::shared_ptr<NcclProcessGroup> pg = nccl_channel(channel);
  try {
    device_.timed(r, &channel.name, [&] {
      if (t.send)
        pg->send(args.output, args.count, args.dtype, t.peer, s, args.name);
      else
        pg->recv(args.output, args.count, args.dtype, t.peer, s, args.name);
    });
  } catch (const std::exception& e) {
    device_.watchdog().report(e.what());
    throw;
  }
  device_.watchdog().track(pg, args, s, options_.collectives.timeout);
}

DeviceProcessGroup& CudaCommunicator::staged_group(const ProcessGroup& g, StreamRole r) {
  // One Gloo context per (stream, group), as the CPU backend (NOTE [Gloo threading rule]); a
  // pipeline channel's one per channel, whatever the stream: its two ends may issue on
  // different streams (NOTE [Pipeline p2p on the CUDA backend]).
  const std::string key = is_pipeline_channel(g) ? pipeline_channel_key(g)
                                                 : std::string(stream_name(r)) + "/" + g.key();
  auto it = gloo_groups_.find(key);
  if (it != gloo_groups_.end()) return *it->second;
  std::shared_ptr<::gloo::rendezvous::Store> store;
  if (g.size() > 1) {
    FULLSHARD_CHECK(options_.store != nullptr,
                    "a staged Gloo group of several ranks needs a rendezvous store");
    if (!gloo_device_) gloo_device_ = gloo_backend::make_tcp_device(options_.hostname);
    store = gloo_backend::make_prefix_store(key, options_.store);
  }
  CollectiveWatchdog* wd = &device_.watchdog();
  auto pg = std::make_unique<StagedGlooProcessGroup>(
      store, gloo_device_, g, host_.rank(), device_.device(), options_.collectives,
      device_.pinned(), device_.events(), [wd](const std::string& m) { wd->report(m); });
  return *gloo_groups_.emplace(key, std::move(pg)).first->second;
}

void CudaCommunicator::collective(StreamRole r, const CollectiveCall& call,
                                  const ProcessGroup& group) {
  device_.check_failed();
  // NOTE [One collective decoding] (backends/common/collective_args.h)
  const backends::CollectivePlan plan = backends::plan_collective(
      call, group, host_.rank(), device_.resolve(call.input).ptr, device_.resolve(call.output).ptr);
  const CollectiveArgs& args = plan.args;
  if (is_pipeline_channel(group)) return pipeline_transfer(r, args, group);
  cudaStream_t s = device_.stream(r);
  // The process group first (a communicator's setup is host work: NOTE [Measured stream times on
  // the GPU]), then the copy and the collective between the timing events.
  auto copy_in = [&] {
    if (plan.copy_bytes > 0)
      check_host_call(
          cudaMemcpyAsync(args.output, plan.copy_from, plan.copy_bytes, cudaMemcpyDefault, s),
          "cudaMemcpyAsync", "all_reduce '" + call.name + "' (input copied to output)");
  };
  if (options_.transport == CollectiveTransport::kNccl) {
    std::shared_ptr<NcclProcessGroup> pg = nccl_group(group);
    try {
      device_.timed(r, &group.name, [&] {
        copy_in();
        pg->run(args, s);
      });
    } catch (const std::exception& e) {
      device_.watchdog().report(e.what());  // first error wins; aborts the other communicators
      throw;
    }
    device_.watchdog().track(pg, args, s, options_.collectives.timeout);
  } else {
    DeviceProcessGroup& pg = staged_group(group, r);
    device_.timed(r, &group.name, [&] {
      copy_in();
      pg.run(args, s);
    });
  }
}

}  // namespace fullshard::cuda
