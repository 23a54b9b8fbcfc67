#pragma once
// Reference-counted tensors over backend buffers: the C++ counterpart of Python's
// reference counting, so a buffer is freed (in host order) exactly when the last tensor
// viewing it goes away — as PyTorch frees a storage when its refcount drops to zero.
#include <memory>
#include <string>

#include "core/runtime/backend.h"

namespace fullshard {

class Storage {
 public:
  Storage(Backend& backend, Buffer buffer) : backend_(&backend), buffer_(buffer) {}
  ~Storage() { backend_->free(buffer_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  const Buffer& buffer() const { return buffer_; }

 private:
  Backend* backend_;
  Buffer buffer_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, TensorMeta meta, uint64_t offset_bytes = 0)
      : storage_(std::move(storage)), meta_(std::move(meta)), offset_(offset_bytes) {}

  // Allocates a new tensor on `stream`'s pool. Throws OutOfMemoryError.
  static Tensor empty(Backend& b, TensorMeta meta, MemCategory category, StreamRole stream,
                      std::string_view what);

  explicit operator bool() const { return static_cast<bool>(storage_); }
  const TensorMeta& meta() const { return meta_; }
  DType dtype() const { return meta_.dtype; }
  const Shape& shape() const { return meta_.shape; }
  int64_t numel() const { return meta_.numel(); }
  uint64_t nbytes() const { return meta_.nbytes(); }
  TensorRef ref() const { return TensorRef{storage_ ? storage_->buffer().id : 0, offset_, meta_}; }
  // A view with another shape / offset over the same storage.
  Tensor view(TensorMeta meta, uint64_t extra_offset_bytes = 0) const {
    return Tensor(storage_, std::move(meta), offset_ + extra_offset_bytes);
  }
  // True when this is the only reference to the storage (in-place accumulation is safe).
  bool unique() const { return storage_.use_count() == 1; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

 private:
  std::shared_ptr<Storage> storage_;
  TensorMeta meta_;
  uint64_t offset_ = 0;
};

}  // namespace fullshard
