#pragma once
// The real CPU backend: buffers are host memory from the shared caching allocator, each
// stream is a worker thread (stream_worker.h), kernels are backends/cpu/kernels, collectives
// go over Gloo's TCP transport (backends/gloo). The host program (TrainingProgram) runs on the
// calling thread and only blocks where it says so (synchronize).
#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cpu/data.h"
#include "backends/cpu/host_memory.h"
#include "backends/cpu/stream_worker.h"
#include "backends/gloo/process_group.h"
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
  // kLoadBatch: sequences come from here (byte tokens), sampled with `data_seed`.
  std::shared_ptr<const TextCorpus> corpus;
  uint64_t data_seed = 0;
  // Sequences per micro-batch of every rank (global sample numbering); empty: all equal.
  std::vector<int64_t> rank_batches;
  bool record_timeline = true;
};

namespace detail {
// Constructed before Backend so the allocator's segment source outlives it.
struct HostMemoryHolder {
  HostSegmentSource host_segments;
};
}  // namespace detail

class CpuBackend : private detail::HostMemoryHolder, public Backend {
 public:
  explicit CpuBackend(CpuBackendOptions options);
  ~CpuBackend() override;

  void launch(StreamRole stream, const OpCall& op) override;
  void collective(StreamRole stream, const CollectiveCall& call, const ProcessGroup& group) override;
  EventId record_event(StreamRole stream) override;
  void wait_event(StreamRole stream, EventId event) override;
  // Blocks the host; rethrows the first error any stream hit (NOTE [Failure propagation]).
  void synchronize(EventId event) override;
  void read_scalar(StreamRole stream, const TensorRef& ref) override;
  std::vector<double> take_scalars() override;

  // Waits for every stream to finish what was queued; rethrows a stream's error.
  void synchronize_all();
  // Address of a tensor's first element (tests and tools read real values through this).
  void* data(const TensorRef& ref) const;
  // The [begin, end) of every task each stream ran since the last call, in seconds since the
  // backend was created, by role; clears them.
  std::array<std::vector<std::pair<double, double>>, kNumStreams> take_busy_intervals();
  // With options.record_timeline: for each event of memory().timeline(), the host time it
  // happened (seconds since the backend was created) and what was allocated or freed (an
  // index into timeline_names()).
  const std::vector<double>& timeline_times() const { return timeline_times_; }
  const std::vector<int32_t>& timeline_whats() const { return timeline_whats_; }
  const std::vector<std::string>& timeline_names() const { return timeline_names_; }
  // FLOPs (as OpCall declares them) of the kernels launched since the last call; clears them.
  double take_launched_flops() { return std::exchange(launched_flops_, 0.0); }

 protected:
  void on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) override;
  void on_free(const Buffer& buffer) override;

 private:
  CpuBackendOptions options_;
  FailureState failure_;
  std::vector<std::unique_ptr<StreamWorker>> streams_;
  std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  std::mutex intervals_mu_;
  std::array<std::vector<std::pair<double, double>>, kNumStreams> intervals_;
  std::unordered_map<uint64_t, uint8_t*> addresses_;  // live buffer id -> first byte
  std::unordered_map<EventId, std::shared_ptr<CpuEvent>> events_;
  EventId next_event_ = 0;
  double launched_flops_ = 0;
  std::vector<double> timeline_times_;
  std::vector<int32_t> timeline_whats_;
  std::vector<std::string> timeline_names_;
  std::unordered_map<std::string, int32_t> timeline_name_ids_;
  std::unordered_map<uint64_t, int32_t> live_whats_;  // buffer id -> what (for its free)
  void record_timeline_point(int32_t what);
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
  std::map<std::string, std::unique_ptr<gloo_backend::GlooProcessGroup>> groups_;

  StreamWorker& stream(StreamRole r) { return *streams_[static_cast<size_t>(r)]; }
  uint8_t* resolve(const TensorRef& ref) const;
  void check_failed() const;
  void run_timed(StreamRole r, const std::function<void()>& fn);
  void release_host_buffers(bool all);
  gloo_backend::GlooProcessGroup& process_group(const ProcessGroup& g, StreamRole r);
  void load_batch(const OpCall& op, void* tokens, void* labels);
};

}  // namespace fullshard::cpu
