#include "core/runtime/device.h"

#include "core/common/error.h"

namespace fullshard {

void Device::copy_from_host(const TensorRef& ref, const void* src) {
  FULLSHARD_CHECK(false, "copy_from_host: this backend cannot load host data");
}

void Device::copy_to_host(const TensorRef& ref, void* dst) {
  FULLSHARD_CHECK(false, "copy_to_host: this backend holds no data (the simulator)");
}

}  // namespace fullshard
