#include "backends/common/device_kernels.h"

#include <string>

#include "core/common/error.h"
#include "core/runtime/op_table.h"

namespace fullshard::backends {

void check_runs_on_device(const OpCall& op, std::string_view backend) {
  FULLSHARD_CHECK(!op_info(op.kind).has(kOpSimulatedOnly),
                  std::string(op_kind_name(op.kind)) + " " + op.name + ": not supported on " +
                      std::string(backend) +
                      " (mixture-of-experts, float8 and tensor_parallel.async ops run in the "
                      "simulator only: docs/moe.md, docs/float8.md, docs/scenario-format.md)");
}

}  // namespace fullshard::backends
