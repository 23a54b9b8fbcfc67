#include "simulator/engine/cost_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/common/error.h"

namespace fullshard::sim {
namespace {

void require(double value, bool allow_zero, const char* field) {
  const bool ok = std::isfinite(value) && (allow_zero ? value >= 0 : value > 0);
  if (!ok) {
    throw InputError(std::string("placeholder_cost.") + field,
                     "must be a finite number " + std::string(allow_zero ? ">= 0" : "> 0") +
                         ", got " + std::to_string(value),
                     "set it to the device's figure");
  }
}

}  // namespace

PlaceholderCostModel::PlaceholderCostModel(PlaceholderCostOptions options) : options_(options) {
  require(options_.peak_flops, false, "peak_flops");
  require(options_.memory_bandwidth, false, "memory_bandwidth");
  require(options_.collective_latency_s, true, "collective_latency_s");
  require(options_.link_bandwidth, false, "link_bandwidth");
  require(options_.launch_overhead_s, true, "launch_overhead_s");
  require(options_.storage_write_bandwidth, false, "storage_write_bandwidth");
}

double PlaceholderCostModel::kernel_seconds(const Instr& kernel) const {
  return std::max(kernel.flops / options_.peak_flops, kernel.bytes / options_.memory_bandwidth);
}

double PlaceholderCostModel::collective_seconds(const Instr& c, const GroupInfo& group) const {
  const double n = static_cast<double>(group.ranks.size());
  if (n <= 1) return 0;
  const double bytes = static_cast<double>(c.coll_bytes);
  const double lat = options_.collective_latency_s;
  const double ring = lat + bytes * (n - 1) / n / options_.link_bandwidth;
  switch (c.coll) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter: return ring;
    case CollectiveKind::kAllReduce: return 2 * ring;
    case CollectiveKind::kBroadcast: return lat + bytes / options_.link_bandwidth;
    case CollectiveKind::kBarrier: return lat;
    case CollectiveKind::kAllToAll:  // dims: bytes sent to / received from the other members
      return lat + static_cast<double>(std::max(c.dims[0], c.dims[1])) / options_.link_bandwidth;
  }
  return ring;
}

CollectiveChoice PlaceholderCostModel::collective_choice(const Instr& c,
                                                         const GroupInfo& group) const {
  if (group.ranks.size() <= 1 || c.coll == CollectiveKind::kBarrier) return {};
  return {"ring", ""};
}

}  // namespace fullshard::sim
