#pragma once
// One rank's device, as the host program sees it (docs/architecture.md). The FSDP runtime
// and the models are written once against this interface; the simulator records what they
// issue, real backends execute it.
//
// NOTE [Allocation in host order]: allocate()/free() are non-virtual and go through the
// shared MemoryTracker in the order the host program calls them, exactly as PyTorch's
// caching allocator sees cudaMalloc/free requests from the CPU thread. That is why the
// simulator's allocated/reserved bytes equal a real backend's to the byte.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/memory/memory_tracker.h"
#include "core/memory/moe_memory.h"
#include "core/mesh/device_mesh.h"
#include "core/runtime/communicator.h"
#include "core/runtime/device.h"
#include "core/runtime/measurement_probe.h"
#include "core/runtime/op.h"
#include "core/runtime/stream.h"

namespace fullshard {

// Thrown by Backend::allocate when the device is out of memory. The snapshot is the state
// just before the failing request.
class OutOfMemoryError : public std::runtime_error {
 public:
  OutOfMemoryError(uint64_t requested, MemCategory category, std::string what_for,
                   MemorySnapshot at_failure, uint64_t capacity);
  uint64_t requested_bytes;
  MemCategory category;
  std::string what_for;
  MemorySnapshot at_failure;
  uint64_t capacity_bytes;
};

// One op the host launched, as Backend::launch saw it (with set_record_launches): host_seq()
// after its tick (the seq its KernelTime carries), kind, name and the cost model's FLOPs and bytes.
struct LaunchedOp {
  uint64_t seq = 0;
  OpKind kind = OpKind::kFill;
  std::string name;
  double flops = 0, bytes = 0;
};

// The host thread that issues work, as PyTorch has them: the Python thread runs forward, the
// loss and the optimizer; autograd's device thread runs every backward (and the recomputation
// of activation checkpointing inside it). cuBLAS handles are per thread, so each keeps its own
// workspace (NOTE [cuBLAS workspaces]).
enum class HostThread : uint8_t { kMain, kAutograd };
constexpr int kNumHostThreads = 2;

// NOTE [Backend entry points]: the work methods are public and non-virtual. Each ticks the
// host sequence (one tick per host-program call that the simulator records: launch,
// collective, record_event, wait_event and synchronize of a real event, annotate, fsdp_hook) and
// then calls the part that does the work (NOTE [Backend parts]). So every backend sees the host
// program in the same positions, and a backend cannot forget a tick. read_scalar is a read-back,
// not an instruction, and does not tick.
//
// NOTE [Backend parts]: a Backend is a facade over small parts, in the shape of ggml's backend:
// a Device (core/runtime/device.h: kernels, events, synchronize, host copies, scalar reads), a
// Communicator (communicator.h: collectives over process groups) and an optional
// MeasurementProbe (measurement_probe.h: the take_* hooks and clock_s). Backend itself keeps
// what every backend shares: the host sequence, the allocator and its observer, the cuBLAS
// workspaces, the step and the launch records. A subclass builds its parts and attach()es them
// in its constructor: the CPU and CUDA backends their device and communicator and the shared
// MeasurementStore (backends/common), the simulator its recording device and communicator (no
// probe). Without a probe the take_* hooks return nothing and clock_s() 0.
class Backend {
 public:
  // `source` supplies the allocator's segments (null: virtual addresses, as the simulator
  // uses); the backend owns it, and it outlives the allocator.
  Backend(int rank, int world_size, AllocatorOptions allocator,
          std::unique_ptr<SegmentSource> source = nullptr, bool record_timeline = true);
  virtual ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // ---- memory (shared code, see NOTE above) ----
  // `stream` picks the allocator pool (per-stream pools). Throws OutOfMemoryError.
  Buffer allocate(uint64_t bytes, MemCategory category, StreamRole stream, std::string_view what);
  Buffer allocate_host(uint64_t bytes, MemCategory category, std::string_view what);
  void free(const Buffer& buffer);  // never throws
  const MemoryTracker& memory() const { return memory_; }
  MemoryTracker& memory() { return memory_; }
  // NOTE [MoE memory at the peak] (core/memory/moe_memory.h): from now on, keep which device
  // bytes are the routed experts' and the routed tokens'; moe_at_peak() is their split when the
  // allocated bytes (last) reached their peak. TrainingProgram turns it on for a MoE model.
  void track_moe_memory() { track_moe_ = true; }
  bool tracks_moe_memory() const { return track_moe_; }
  const MoeBytes& moe_at_peak() const { return moe_at_peak_; }

  // ---- work (NOTE [Backend entry points]) ----
  void launch(StreamRole stream, const OpCall& op);
  void collective(StreamRole stream, const CollectiveCall& call, const ProcessGroup& group);
  EventId record_event(StreamRole stream);
  void wait_event(StreamRole stream, EventId event);
  // Host blocks until the event's work is done (CPU offload, step boundary).
  void synchronize(EventId event);
  // Convenience: `waiter` waits for everything issued so far on `waitee`.
  void wait_stream(StreamRole waiter, StreamRole waitee) {
    wait_event(waiter, record_event(waitee));
  }
  // Phase markers for reports.
  void annotate(std::string_view label);
  // The host program runs one of FSDP2's hooks (`what`: "pre_forward layers.3", ...) over a
  // group of `params` parameters: host-only work, which the simulator prices (NOTE [FSDP hook
  // host cost] in simulator/cost/hardware_cost_model.cc) and real backends simply run.
  void fsdp_hook(std::string_view what, int params);

  // ---- the issuing thread and cuBLAS workspaces (NOTE [cuBLAS workspaces]) ----
  // Which host thread issues what follows; returns the previous one (autograd's backward sets
  // kAutograd and restores it).
  HostThread set_host_thread(HostThread thread) { return std::exchange(host_thread_, thread); }
  HostThread host_thread() const { return host_thread_; }
  // Bytes of the workspace each (host thread, stream) pair takes from the allocator at its first
  // GEMM and keeps (the hardware profile's blas_workspace_bytes; 0: none). Set before any launch.
  void set_blas_workspace_bytes(uint64_t bytes) { blas_workspace_bytes_ = bytes; }
  uint64_t blas_workspace_bytes() const { return blas_workspace_bytes_; }
  // Workspaces taken so far (tests, reports).
  int blas_workspace_count() const;
  // The workspace of the current host thread on `stream` (empty before its first GEMM): in a
  // Device's launch of a GEMM it is always there.
  const Buffer& blas_workspace(StreamRole stream) const {
    return blas_workspaces_[static_cast<size_t>(host_thread_)][static_cast<size_t>(stream)];
  }

  // ---- host read-back (loss.item()) ----
  // The value of a one-element fp32/bf16/fp16 tensor is copied to the host when `stream`
  // reaches this point; after a synchronize() that covers it, take_scalars() returns the
  // values in the order they were requested. No allocation is involved. The simulator has
  // no values and returns nothing.
  void read_scalar(StreamRole stream, const TensorRef& ref) { device_->read_scalar(stream, ref); }
  std::vector<double> take_scalars() { return device_->take_scalars(); }

  // ---- real backends (the simulator has no data and no clock) ----
  // True when buffers hold real data (copy_to_host works).
  bool has_data() const { return device_->has_data(); }
  // Waits until every stream finished what was issued; rethrows a stream's error.
  void synchronize_device() { device_->synchronize_device(); }
  // Copies the tensor's bytes (ref.nbytes()) to `dst` once everything issued so far on every
  // stream is done (blocks the host). Throws InternalError on a backend without data.
  void copy_to_host(const TensorRef& ref, void* dst) { device_->copy_to_host(ref, dst); }
  // Copies ref.nbytes() bytes from `src` into the tensor once everything issued so far is
  // done (blocks the host): loading a checkpoint or weights. Throws InternalError on a
  // backend without data (the simulator).
  void copy_from_host(const TensorRef& ref, const void* src) { device_->copy_from_host(ref, src); }
  // Optional per-step measurement (the probe): each stream's busy intervals since the last call,
  // or nullopt when the backend does not measure them.
  std::optional<StreamIntervals> take_busy_intervals() {
    return probe_ ? probe_->take_busy_intervals() : std::nullopt;
  }
  // Optional, with take_busy_intervals(): the collectives run since the last call.
  std::vector<CollectiveInterval> take_collective_intervals() {
    return probe_ ? probe_->take_collective_intervals() : std::vector<CollectiveInterval>{};
  }
  // Seconds since the backend was created, on the clock take_busy_intervals() uses.
  double clock_s() const { return probe_ ? probe_->clock_s() : 0.0; }
  // Optional (measured timelines, NOTE [Measured timeline times]): for each kernel and
  // collective started since the last call, {host_seq() when the host issued it, clock_s() when
  // its stream started it}; empty when the backend does not record them.
  std::vector<std::pair<uint64_t, double>> take_work_starts() {
    return probe_ ? probe_->take_work_starts() : std::vector<std::pair<uint64_t, double>>{};
  }
  // Optional (per-op times): every kernel a stream ran since the last call, with the host_seq of
  // its launch; empty when the backend does not time kernels.
  std::vector<KernelTime> take_kernel_times() {
    return probe_ ? probe_->take_kernel_times() : std::vector<KernelTime>{};
  }
  // With set_record_launches(true), every launch() since the last call (the per-op table's names).
  void set_record_launches(bool on) { record_launches_ = on; }
  std::vector<LaunchedOp> take_launched_ops() { return std::exchange(launched_ops_, {}); }
  // Optional: calls by the implementation path that ran them, in this process (the CUDA
  // backend's cuDNN attention: NOTE [Attention path counter]); empty where there is no choice.
  std::vector<std::pair<std::string, int64_t>> path_counts() const {
    return device_->path_counts();
  }
  // FLOPs (as OpCall declares them) of the kernels launched since the last call; clears them.
  double take_launched_flops() { return std::exchange(launched_flops_, 0.0); }
  // Collectives issued since the last call, by CollectiveKind; clears them.
  std::array<int, kCollectiveKindCount> take_collective_counts() {
    return std::exchange(collective_counts_, {});
  }

  // ---- annotations ----
  void set_step(int step) { step_ = step; }
  int step() const { return step_; }

  // Position of the host program (one tick per call above); timelines map it to time.
  uint64_t host_seq() const { return host_seq_; }

  // Called after every allocation and free the host program makes (measured timelines); a
  // free passes an empty `what`.
  using AllocationObserver =
      std::function<void(const Buffer& buffer, bool is_alloc, std::string_view what)>;
  void set_allocation_observer(AllocationObserver observer) { observer_ = std::move(observer); }

 protected:
  // The parts (NOTE [Backend parts]), owned by the subclass and alive as long as this Backend
  // is used; attached once, in the subclass's constructor, before any work.
  void attach(Device& device, Communicator& communicator, MeasurementProbe* probe = nullptr) {
    device_ = &device;
    communicator_ = &communicator;
    probe_ = probe;
  }
  SegmentSource* segment_source() const { return source_.get(); }

 private:
  int rank_;
  int world_size_;
  std::unique_ptr<SegmentSource> source_;  // before memory_: outlives the allocator
  MemoryTracker memory_;
  uint64_t host_seq_ = 0;
  int step_ = 0;
  double launched_flops_ = 0;
  std::array<int, kCollectiveKindCount> collective_counts_{};
  bool out_of_memory_ = false;  // after an OOM, frees during unwinding are not recorded
  AllocationObserver observer_;
  bool track_moe_ = false;
  MoeBytes moe_live_{}, moe_at_peak_{};
  std::unordered_map<uint64_t, std::pair<MoePart, uint64_t>> moe_buffers_;  // id -> part, bytes
  bool record_launches_ = false;
  std::vector<LaunchedOp> launched_ops_;
  HostThread host_thread_ = HostThread::kMain;
  uint64_t blas_workspace_bytes_ = 0;
  std::array<std::array<Buffer, kNumStreams>, kNumHostThreads> blas_workspaces_{};
  Device* device_ = nullptr;
  Communicator* communicator_ = nullptr;
  MeasurementProbe* probe_ = nullptr;  // optional
  uint64_t next_host_seq() { return ++host_seq_; }
};

}  // namespace fullshard
