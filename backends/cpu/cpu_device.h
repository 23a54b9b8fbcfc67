#pragma once
// The CPU backend's device part (NOTE [Backend parts] in core/runtime/backend.h): buffers are
// host memory, each stream is a worker thread (stream_worker.h), kernels are
// backends/cpu/kernels, and every task's interval goes to the backend's MeasurementStore.
#include <array>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/common/buffer_addresses.h"
#include "backends/common/event_table.h"
#include "backends/common/host_fills.h"
#include "backends/common/measurements.h"
#include "backends/cpu/stream_worker.h"
#include "core/data/text_corpus.h"
#include "core/runtime/backend.h"

namespace fullshard::cpu {

class CpuDevice : public Device {
 public:
  // `host`: the Backend this device serves (host_seq, rank, the memory timeline); `batches`:
  // kLoadBatch's data. Both, and `measurements`, outlive the device.
  CpuDevice(const Backend& host, const BatchSource& batches,
            backends::MeasurementStore& measurements);
  ~CpuDevice() override;  // close()s

  void launch(StreamRole stream, const OpCall& op) override;
  EventId record_event(StreamRole stream) override;
  void wait_event(StreamRole stream, EventId event) override;
  // Blocks the host; rethrows the first error any stream hit (NOTE [Failure propagation]).
  void synchronize(EventId event) override;
  void read_scalar(StreamRole stream, const TensorRef& ref) override;
  std::vector<double> take_scalars() override;
  void on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) override;
  void on_free(const Buffer& buffer) override;
  // Waits for every stream to finish what was queued; rethrows a stream's error.
  void synchronize_device() override;
  void copy_idle(const TensorRef& ref, void* host, bool to_host) override;

  // ---- for the communicator (cpu_communicator.h) and the backend ----
  StreamWorker& stream(StreamRole r) { return *streams_[static_cast<size_t>(r)]; }
  uint8_t* resolve(const TensorRef& ref) const { return addresses_.pointer(ref); }
  void check_failed() const { failure_.rethrow_if_failed(); }
  // Runs `fn` (on stream `r`'s thread), recording its busy interval, for a kernel its time, and
  // (`starts`: the memory timeline was being recorded when the host issued it, a value taken on
  // the host thread) its start for the work issued at host_seq `seq`.
  // `group`: the process group's name when fn runs a collective (take_collective_intervals).
  void run_timed(StreamRole r, uint64_t seq, bool starts, const std::function<void()>& fn,
                 const std::string* group = nullptr);
  // Every stream finished what was queued (no error check): before memory is given back.
  void drain();
  // Drains the streams and gives every deferred host buffer back (the backend's teardown).
  void close();

 private:
  const Backend& host_;
  const BatchSource& batches_;
  backends::MeasurementStore& measurements_;
  FailureState failure_;
  std::vector<std::unique_ptr<StreamWorker>> streams_;
  backends::BufferAddresses addresses_;
  backends::EventTable<std::shared_ptr<CpuEvent>> events_;
  // Host (CPU-offloaded) buffers are plain allocations, released once every stream passed
  // the point where the host freed them (the pinned host allocator's event rule).
  struct DeferredHostFree {
    uint8_t* ptr;
    std::array<std::shared_ptr<CpuEvent>, kNumStreams> fences;
  };
  std::vector<DeferredHostFree> deferred_host_frees_;
  std::mutex scalars_mu_;
  std::vector<double> scalars_;

  backends::HostFillContext host_fill_context() const;
  void release_host_buffers(bool all);
};

}  // namespace fullshard::cpu
