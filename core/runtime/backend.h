#pragma once
// One rank's device, as the host program sees it (docs/architecture.md). The FSDP runtime
// and the models are written once against this interface; the simulator records what they
// issue, real backends execute it.
//
// NOTE [Allocation in host order]: allocate()/free() are non-virtual and go through the
// shared MemoryTracker in the order the host program calls them, exactly as PyTorch's
// caching allocator sees cudaMalloc/free requests from the CPU thread. That is why the
// simulator's allocated/reserved bytes equal a real backend's to the byte.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/memory/memory_tracker.h"
#include "core/mesh/device_mesh.h"
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

class Backend {
 public:
  Backend(int rank, int world_size, AllocatorOptions allocator, SegmentSource* source = nullptr,
          bool record_timeline = true);
  virtual ~Backend() = default;
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

  // ---- work ----
  virtual void launch(StreamRole stream, const OpCall& op) = 0;
  virtual void collective(StreamRole stream, const CollectiveCall& call, const ProcessGroup& group) = 0;
  virtual EventId record_event(StreamRole stream) = 0;
  virtual void wait_event(StreamRole stream, EventId event) = 0;
  // Host blocks until the event's work is done (CPU offload, step boundary).
  virtual void synchronize(EventId event) = 0;
  // Convenience: `waiter` waits for everything issued so far on `waitee`.
  void wait_stream(StreamRole waiter, StreamRole waitee) { wait_event(waiter, record_event(waitee)); }

  // ---- host read-back (loss.item()) ----
  // The value of a one-element fp32/bf16/fp16 tensor is copied to the host when `stream`
  // reaches this point; after a synchronize() that covers it, take_scalars() returns the
  // values in the order they were requested. No allocation is involved. The simulator has
  // no values and returns nothing.
  virtual void read_scalar(StreamRole stream, const TensorRef& ref) {}
  virtual std::vector<double> take_scalars() { return {}; }

  // ---- annotations (optional; default no-op) ----
  virtual void set_step(int step) { step_ = step; }
  int step() const { return step_; }
  virtual void annotate(std::string_view label) {}  // phase markers for reports

  // Position of the host program (one tick per call above); timelines map it to time.
  uint64_t host_seq() const { return host_seq_; }

 protected:
  uint64_t next_host_seq() { return ++host_seq_; }
  // Backend hooks around the shared allocator (record, map, check). Default no-op.
  virtual void on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) {}
  virtual void on_free(const Buffer& buffer) {}

 private:
  int rank_;
  int world_size_;
  MemoryTracker memory_;
  uint64_t host_seq_ = 0;
  int step_ = 0;
  bool out_of_memory_ = false;  // after an OOM, frees during unwinding are not recorded
};

}  // namespace fullshard
