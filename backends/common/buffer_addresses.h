#pragma once
// The live buffers of a real backend: Buffer id -> first byte, and whether it is host memory
// (CPU offload). Filled in the backend's on_allocate, emptied in on_free; every TensorRef the
// host program passes is resolved here. Used from the host program's thread only.
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "core/memory/memory_tracker.h"
#include "core/runtime/op.h"

namespace fullshard::backends {

struct Address {
  uint8_t* ptr = nullptr;
  bool on_host = false;
  uint64_t bytes = 0;  // the buffer's requested size (resolve checks each tensor fits in it)
};

class BufferAddresses {
 public:
  // The allocator's address of a device buffer (its block in a segment).
  static uint8_t* block_address(const Buffer& buffer) {
    return reinterpret_cast<uint8_t*>(buffer.block.address);
  }
  void add(const Buffer& buffer, uint8_t* ptr) {
    map_[buffer.id] = Address{ptr, buffer.on_host, buffer.bytes};
  }
  // The buffer's address, removed; nullopt for a buffer never added.
  std::optional<Address> remove(uint64_t buffer_id);
  // The tensor's first byte ({nullptr, false} for buffer 0, an empty tensor); InternalError
  // ("tensor of freed buffer N used") for a buffer not live, or for a tensor that does not fit in
  // its buffer (a view past its end would write over a neighbour, or over the host heap).
  Address resolve(const TensorRef& ref) const;
  uint8_t* pointer(const TensorRef& ref) const { return resolve(ref).ptr; }
  size_t size() const { return map_.size(); }

 private:
  std::unordered_map<uint64_t, Address> map_;
};

}  // namespace fullshard::backends
