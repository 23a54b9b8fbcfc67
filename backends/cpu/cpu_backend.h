#pragma once
// The real CPU backend: buffers are host memory from the shared caching allocator, each
// stream is a worker thread (stream_worker.h), kernels are backends/cpu/kernels, collectives
// go over Gloo's TCP transport (backends/gloo). The host program (TrainingProgram) runs on the
// calling thread and only blocks where it says so (synchronize).
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/common/buffer_addresses.h"
#include "backends/common/event_table.h"
#include "backends/common/gloo_collective_group.h"
#include "backends/common/host_fills.h"
#include "backends/common/measurements.h"
#include "backends/cpu/host_memory.h"
#include "backends/cpu/stream_worker.h"
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
  gloo_backend::ProcessGroupOptions collectives;
  // kLoadBatch's data (core/data/text_corpus.h).
  BatchSource batches;
  bool record_timeline = true;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(CpuBackendOptions options);
  ~CpuBackend() override;

  std::vector<double> take_scalars() override;
  bool has_data() const override { return true; }
  // Waits for every stream to finish what was queued; rethrows a stream's error.
  void synchronize_device() override;
  void copy_to_host(const TensorRef& ref, void* dst) override;
  void copy_from_host(const TensorRef& ref, const void* src) override;
  // The [begin, end) of every task each stream ran since the last call, by role; clears them.
  std::optional<StreamIntervals> take_busy_intervals() override;
  std::vector<std::pair<uint64_t, double>> take_work_starts() override;
  std::vector<CollectiveInterval> take_collective_intervals() override;
  // Every kernel's [begin, end) on its stream's thread, with its launch's host_seq (per-op times).
  std::vector<KernelTime> take_kernel_times() override;
  double clock_s() const override;

 protected:
  void do_launch(StreamRole stream, const OpCall& op) override;
  void do_collective(StreamRole stream, const CollectiveCall& call,
                     const ProcessGroup& group) override;
  EventId do_record_event(StreamRole stream) override;
  void do_wait_event(StreamRole stream, EventId event) override;
  // Blocks the host; rethrows the first error any stream hit (NOTE [Failure propagation]).
  void do_synchronize(EventId event) override;
  void do_read_scalar(StreamRole stream, const TensorRef& ref) override;
  void on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) override;
  void on_free(const Buffer& buffer) override;

 private:
  CpuBackendOptions options_;
  FailureState failure_;
  std::vector<std::unique_ptr<StreamWorker>> streams_;
  backends::MeasurementStore measurements_;  // the take_* hooks and clock_s()
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
  // Process groups by (group key, stream): each stream's collectives get their own Gloo
  // context, so concurrent streams never share one. Created lazily on the stream's thread.
  std::mutex groups_mu_;
  std::map<std::string, std::unique_ptr<backends::GlooCollectiveGroup>> groups_;

  StreamWorker& stream(StreamRole r) { return *streams_[static_cast<size_t>(r)]; }
  uint8_t* resolve(const TensorRef& ref) const;
  void check_failed() const;
  backends::HostFillContext host_fill_context() const;
  // Runs `fn` on stream `r`'s thread, recording its busy interval, for a kernel its time, and
  // (`starts`: the memory timeline was being recorded when the host issued it, a value taken on
  // the host thread) its start for the work issued at host_seq `seq`.
  // `group`: the process group's name when fn runs a collective (take_collective_intervals).
  void run_timed(StreamRole r, uint64_t seq, bool starts, const std::function<void()>& fn,
                 const std::string* group = nullptr);
  void release_host_buffers(bool all);
  backends::GlooCollectiveGroup& process_group(const ProcessGroup& g, StreamRole r);
};

}  // namespace fullshard::cpu
