#pragma once
// Tensors over a Backend's buffers (core/tensor/tensor.h): the storage gives its buffer back to
// the backend's allocator when the last tensor viewing it goes away, in host order (NOTE
// [Allocation in host order] in core/runtime/backend.h).
#include <memory>
#include <string_view>

#include "core/runtime/backend.h"
#include "core/tensor/tensor.h"

namespace fullshard {

class BackendStorage final : public Storage {
 public:
  BackendStorage(Backend& backend, Buffer buffer)
      : Storage(buffer.id, buffer.bytes, buffer.on_host), backend_(&backend), buffer_(buffer) {}
  ~BackendStorage() override { backend_->free(buffer_); }
  const Buffer& buffer() const { return buffer_; }

 private:
  Backend* backend_;
  Buffer buffer_;
};

// torch.empty on `stream`'s pool of the backend's device: a new tensor. Throws OutOfMemoryError.
Tensor empty_tensor(Backend& b, TensorMeta meta, MemCategory category, StreamRole stream,
                    std::string_view what);
// A tensor over `buffer` (from b.allocate or b.allocate_host), which it now owns.
inline Tensor adopt_buffer(Backend& b, Buffer buffer, TensorMeta meta) {
  return Tensor(std::make_shared<BackendStorage>(b, buffer), std::move(meta));
}

}  // namespace fullshard
