#include "backends/cuda/vmm_granularity.h"

#include "core/common/error.h"

namespace fullshard::cuda {

void check_expandable_granularity(uint64_t granularity, const std::string& device_name) {
  if (granularity != 0 && kExpandablePageUnit % granularity == 0) return;
  throw InputError("hardware.allocator.expandable_segments",
                   "is true, but " + device_name + " maps memory in granules of " +
                       std::to_string(granularity) +
                       " bytes, which do not divide the allocator's 2 MiB pages",
                   "set hardware.allocator.expandable_segments to false for this device");
}

}  // namespace fullshard::cuda
