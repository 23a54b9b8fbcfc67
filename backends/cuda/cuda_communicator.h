#pragma once
// The CUDA backend's communicator part (NOTE [Backend parts] in core/runtime/backend.h):
// collectives over NCCL (one communicator per process group) or over Gloo staged through pinned
// host memory (one group per (stream, group): ranks sharing a GPU), as collective_transport.h
// chose; each between the device's timing events on its stream.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/collective_transport.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/device_process_group.h"
#include "backends/gloo/process_group.h"
#include "core/runtime/communicator.h"

namespace gloo::rendezvous {
class Store;
}
namespace gloo::transport {
class Device;
}

namespace fullshard::cuda {

class NcclProcessGroup;
class StagedGlooProcessGroup;

struct CudaCommunicatorOptions {
  std::shared_ptr<::gloo::rendezvous::Store> store;  // rendezvous (NCCL unique ids, staged Gloo)
  std::string hostname = "127.0.0.1";                // staged Gloo's TCP device
  gloo_backend::ProcessGroupOptions collectives;     // timeout, fingerprints
  CollectiveTransport transport = CollectiveTransport::kNccl;
  // This rank's pipeline channels (pipeline_p2p_groups), whose NCCL communicators are created
  // together at its first transfer (NOTE [Pipeline p2p on the CUDA backend]); a channel missing
  // here is created at its own first transfer.
  std::vector<ProcessGroup> pipeline_channels;
};

class CudaCommunicator : public Communicator {
 public:
  // `host` and `device` outlive the communicator.
  CudaCommunicator(const Backend& host, CudaDevice& device, CudaCommunicatorOptions options);
  ~CudaCommunicator() override;

  void collective(StreamRole stream, const CollectiveCall& call,
                  const ProcessGroup& group) override;
  // Finishes the staged groups' queued collectives and joins their workers (teardown: they
  // report failures to the device's watchdog, so they go before it).
  void close_staged();

 private:
  const Backend& host_;
  CudaDevice& device_;
  CudaCommunicatorOptions options_;
  std::shared_ptr<::gloo::transport::Device> gloo_device_;  // staged Gloo's TCP device (lazy)
  std::map<std::string, std::shared_ptr<NcclProcessGroup>> nccl_groups_;        // by group key
  std::map<std::string, std::unique_ptr<StagedGlooProcessGroup>> gloo_groups_;  // by stream/group
  std::map<std::string, std::shared_ptr<NcclProcessGroup>> nccl_channels_;      // by channel key
  std::map<std::string, StreamRole> channel_streams_;  // staged: the one stream of a channel

  DeviceProcessGroup& staged_group(const ProcessGroup& g, StreamRole r);
  std::shared_ptr<NcclProcessGroup> nccl_group(const ProcessGroup& g);
  std::shared_ptr<NcclProcessGroup> nccl_channel(const ProcessGroup& channel);
  // A pipeline channel's transfer (NOTE [Pipeline p2p on the CUDA backend]).
  void pipeline_transfer(StreamRole r, const CollectiveArgs& args, const ProcessGroup& channel);
};

}  // namespace fullshard::cuda
