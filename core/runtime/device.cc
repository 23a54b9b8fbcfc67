#include "core/runtime/device.h"

#include "core/common/error.h"

namespace fullshard {

void Device::copy_to_host(const TensorRef& ref, void* dst) {
  FULLSHARD_CHECK(has_data_, "copy_to_host: this backend holds no data (the simulator)");
  synchronize_device();
  copy_idle(ref, dst, true);
}

void Device::copy_from_host(const TensorRef& ref, const void* src) {
  FULLSHARD_CHECK(has_data_, "copy_from_host: this backend cannot load host data");
  synchronize_device();
  copy_idle(ref, const_cast<void*>(src), false);  // read only: to_host is false
}

void Device::copy_idle(const TensorRef& ref, void* host, bool to_host) {
  FULLSHARD_CHECK(false, "a device with data implements copy_idle");
}

}  // namespace fullshard
