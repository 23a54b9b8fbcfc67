#include "backends/common/buffer_addresses.h"

#include <string>

#include "core/common/error.h"

namespace fullshard::backends {

std::optional<Address> BufferAddresses::remove(uint64_t buffer_id) {
  auto it = map_.find(buffer_id);
  if (it == map_.end()) return std::nullopt;
  const Address a = it->second;
  map_.erase(it);
  return a;
}

Address BufferAddresses::resolve(const TensorRef& ref) const {
  if (ref.buffer_id == 0) return {};
  auto it = map_.find(ref.buffer_id);
  FULLSHARD_CHECK(it != map_.end(),
                  "tensor of freed buffer " + std::to_string(ref.buffer_id) + " used");
  const uint64_t end = ref.offset_bytes + ref.meta.nbytes();
  FULLSHARD_CHECK(end <= it->second.bytes, "tensor of " + std::to_string(ref.meta.nbytes()) +
                                               " bytes at offset " +
                                               std::to_string(ref.offset_bytes) + " of buffer " +
                                               std::to_string(ref.buffer_id) + ", which holds " +
                                               std::to_string(it->second.bytes) + " bytes");
  return {it->second.ptr + ref.offset_bytes, it->second.on_host, it->second.bytes};
}

}  // namespace fullshard::backends
