#include "backends/cpu/cpu_backend.h"

#include <utility>

#include "backends/cpu/host_memory.h"

namespace fullshard::cpu {

CpuBackend::CpuBackend(CpuBackendOptions options)
    : Backend(options.rank, options.world_size, options.allocator,
              std::make_unique<HostSegmentSource>(), options.record_timeline),
      batches_(std::move(options.batches)),
      device_(*this, batches_, measurements_),
      communicator_(*this, device_, std::move(options.store), std::move(options.device),
                    std::move(options.hostname), std::move(options.collectives)) {
  attach(device_, communicator_, &measurements_);
  static_cast<HostSegmentSource*>(segment_source())->before_unmap = [this] { device_.drain(); };
}

CpuBackend::~CpuBackend() {
  device_.close();
  // The allocator (in Backend) releases its segments after the parts: nothing to drain then.
  static_cast<HostSegmentSource*>(segment_source())->before_unmap = nullptr;
}

}  // namespace fullshard::cpu
