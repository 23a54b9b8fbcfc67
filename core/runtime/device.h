#pragma once
// The device part of a Backend (NOTE [Backend parts] in core/runtime/backend.h): where the
// host program's kernels, events and host copies go. Backend's entry points tick the host
// sequence, then call these; an implementation reads the host state (host_seq(), the
// allocator, the cuBLAS workspaces) from the Backend it serves.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/memory/memory_tracker.h"
#include "core/runtime/op.h"
#include "core/runtime/stream.h"

namespace fullshard {

class Device {
 public:
  // `has_data`: buffers hold real data (copy_to_host works).
  explicit Device(bool has_data) : has_data_(has_data) {}
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  bool has_data() const { return has_data_; }

  // ---- work, in host order ----
  virtual void launch(StreamRole stream, const OpCall& op) = 0;
  virtual EventId record_event(StreamRole stream) = 0;
  virtual void wait_event(StreamRole stream, EventId event) = 0;
  // Also called with event 0 (no tick then): a real device may use it to prune state.
  virtual void synchronize(EventId event) = 0;
  virtual void read_scalar(StreamRole stream, const TensorRef& ref) {}
  virtual std::vector<double> take_scalars() { return {}; }

  // ---- the shared allocator's buffers (record, map, check) ----
  virtual void on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) {}
  virtual void on_free(const Buffer& buffer) {}

  // ---- host copies (devices with data) ----
  virtual void synchronize_device() {}
  // Once every stream is idle (synchronize_device()), the tensor's ref.nbytes() bytes into `dst`
  // / from `src`: Backend::copy_to_host / copy_from_host. InternalError on a device without data.
  void copy_to_host(const TensorRef& ref, void* dst);
  void copy_from_host(const TensorRef& ref, const void* src);

  // ---- host-program markers: the simulator records them, real devices run nothing ----
  virtual void annotate(std::string_view label) {}
  virtual void fsdp_hook(std::string_view what, int params) {}
  // Calls by implementation path (Backend::path_counts).
  virtual std::vector<std::pair<std::string, int64_t>> path_counts() const { return {}; }

 protected:
  // A device with data: copies ref.nbytes() bytes between the tensor and `host` (`to_host`: the
  // tensor into `host`; else `host` into the tensor, which is then only read), every stream idle.
  virtual void copy_idle(const TensorRef& ref, void* host, bool to_host);

 private:
  bool has_data_;
};

}  // namespace fullshard
