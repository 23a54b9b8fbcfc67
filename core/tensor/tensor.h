#pragma once
// Reference-counted tensors over storages: the C++ counterpart of Python's reference counting,
// so a storage is released (in host order) exactly when the last tensor viewing it goes away, as
// PyTorch frees a storage when its refcount drops to zero. Who owns the bytes is the Storage's
// business: a Backend's buffer (core/runtime/backend_storage.h: empty_tensor, host_tensor).
#include <cstdint>
#include <memory>
#include <utility>

#include "core/tensor/shape.h"
#include "core/tensor/tensor_ref.h"

namespace fullshard {

// The bytes one or more tensors view. A subclass releases them in its destructor.
class Storage {
 public:
  virtual ~Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  uint64_t buffer_id() const { return buffer_id_; }
  uint64_t nbytes() const { return nbytes_; }
  bool on_host() const { return on_host_; }  // CPU offload's host memory

 protected:
  Storage(uint64_t buffer_id, uint64_t nbytes, bool on_host)
      : buffer_id_(buffer_id), nbytes_(nbytes), on_host_(on_host) {}

 private:
  uint64_t buffer_id_;
  uint64_t nbytes_;
  bool on_host_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, TensorMeta meta, uint64_t offset_bytes = 0)
      : storage_(std::move(storage)), meta_(std::move(meta)), offset_(offset_bytes) {}

  explicit operator bool() const { return static_cast<bool>(storage_); }
  const TensorMeta& meta() const { return meta_; }
  DType dtype() const { return meta_.dtype; }
  const Shape& shape() const { return meta_.shape; }
  int64_t numel() const { return meta_.numel(); }
  uint64_t nbytes() const { return meta_.nbytes(); }
  bool on_host() const { return storage_ && storage_->on_host(); }
  TensorRef ref() const { return TensorRef{storage_ ? storage_->buffer_id() : 0, offset_, meta_}; }
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
