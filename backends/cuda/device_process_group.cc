#include "backends/cuda/device_process_group.h"

namespace fullshard::cuda {

std::string DeviceProcessGroup::text() const {
  std::string s = "'" + group().name + "' [";
  s += group().key();
  s += ']';
  return s;
}

}  // namespace fullshard::cuda
