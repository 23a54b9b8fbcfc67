#pragma once
// The CPU backend's communicator part (NOTE [Backend parts] in core/runtime/backend.h): Gloo on
// host memory (backends/common/gloo_collective_group.h), one process group per (stream, group),
// each collective run in order on its stream's worker thread and timed there.
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/common/gloo_collective_group.h"
#include "backends/cpu/cpu_device.h"
#include "backends/gloo/process_group.h"
#include "core/runtime/communicator.h"

namespace gloo::rendezvous {
class Store;
}
namespace gloo::transport {
class Device;
}

namespace fullshard::cpu {

class CpuCommunicator : public Communicator {
 public:
  // `store` and `device` are needed for groups of several ranks; `host` and `streams` outlive
  // this communicator.
  CpuCommunicator(const Backend& host, CpuDevice& streams,
                  std::shared_ptr<::gloo::rendezvous::Store> store,
                  std::shared_ptr<::gloo::transport::Device> device, std::string hostname,
                  gloo_backend::ProcessGroupOptions options);

  void collective(StreamRole stream, const CollectiveCall& call,
                  const ProcessGroup& group) override;

 private:
  const Backend& host_;
  CpuDevice& streams_;
  std::shared_ptr<::gloo::rendezvous::Store> store_;
  std::shared_ptr<::gloo::transport::Device> device_;  // the compute stream's
  std::string hostname_;
  gloo_backend::ProcessGroupOptions options_;
  // NOTE [One TCP device per stream] (cpu_communicator.cc): by stream, under groups_mu_.
  std::map<StreamRole, std::shared_ptr<::gloo::transport::Device>> stream_devices_;
  std::shared_ptr<::gloo::transport::Device> device_for(StreamRole r);
  // Process groups by (group key, stream): each stream's collectives get their own Gloo
  // context, so concurrent streams never share one. Created lazily on the stream's thread,
  // outside groups_mu_ (NOTE [Rendezvous outside the lock] in cpu_communicator.cc).
  struct LazyGroup {
    std::once_flag once;
    std::unique_ptr<backends::GlooCollectiveGroup> pg;
  };
  std::mutex groups_mu_;
  std::map<std::string, std::shared_ptr<LazyGroup>> groups_;

  // Pipeline channels (NOTE [Pipeline sends and recvs on the CPU]), by name and ranks: the
  // host thread keeps the map and each channel's next tag; the one stream that transfers on a
  // channel constructs its GlooProcessGroup (no lock held while it waits for the peer).
  struct Channel {
    StreamRole stream;
    uint64_t next_tag = 0;
    std::unique_ptr<gloo_backend::GlooProcessGroup> pg;  // the stream's thread only
  };
  std::map<std::string, std::shared_ptr<Channel>> channels_;

  backends::GlooCollectiveGroup& process_group(const ProcessGroup& g, StreamRole r);
  void send_or_recv(StreamRole r, const backends::CollectivePlan& plan, const ProcessGroup& group);
};

}  // namespace fullshard::cpu
