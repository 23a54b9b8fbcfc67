#pragma once
// The real CPU backend: buffers are host memory from the shared caching allocator, each
// stream is a worker thread (stream_worker.h), kernels are backends/cpu/kernels, collectives
// go over Gloo's TCP transport (backends/gloo). The host program (TrainingProgram) runs on the
// calling thread and only blocks where it says so (synchronize). Its parts (NOTE [Backend parts]
// in core/runtime/backend.h): CpuDevice, CpuCommunicator and the shared MeasurementStore.
#include <memory>
#include <string>

#include "backends/common/measurements.h"
#include "backends/cpu/cpu_communicator.h"
#include "backends/cpu/cpu_device.h"
#include "backends/gloo/process_group.h"
#include "core/data/text_corpus.h"
#include "core/runtime/backend.h"

namespace gloo::rendezvous {
class Store;
}
namespace gloo::transport {
class Device;
}

namespace fullshard::cpu {

struct CpuBackendOptions {
  int rank = 0;
  int world_size = 1;
  AllocatorOptions allocator;
  // Rendezvous store shared by all ranks and the TCP device (needed when world_size > 1).
  std::shared_ptr<::gloo::rendezvous::Store> store;
  std::shared_ptr<::gloo::transport::Device> device;
  // The address the other streams' TCP devices listen on (NOTE [One TCP device per stream] in
  // cpu_communicator.cc): the host `device` was made for.
  std::string hostname = "127.0.0.1";
  gloo_backend::ProcessGroupOptions collectives;
  // kLoadBatch's data (core/data/text_corpus.h).
  BatchSource batches;
  bool record_timeline = true;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(CpuBackendOptions options);
  ~CpuBackend() override;

 private:
  BatchSource batches_;
  backends::MeasurementStore measurements_;  // the probe: every task's interval
  CpuDevice device_;
  CpuCommunicator communicator_;  // destroyed first: its groups run on the device's streams
};

}  // namespace fullshard::cpu
