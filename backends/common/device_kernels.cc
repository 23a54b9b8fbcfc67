#include "backends/common/device_kernels.h"

#include <string>

#include "core/common/error.h"
#include "core/runtime/op_table.h"

namespace fullshard::backends {

void check_runs_on_device(const OpCall& op, std::string_view backend, bool (*has_kernel)(OpKind)) {
  FULLSHARD_CHECK(op_info(op.kind).has(kOpHostFill) || has_kernel(op.kind),
                  std::string(op_kind_name(op.kind)) + " " + op.name + ": not supported on " +
                      std::string(backend) +
                      " (its kernel library lacks the kind; mixture-of-experts, float8 and "
                      "tensor_parallel.async ops run in the simulator: docs/moe.md, "
                      "docs/float8.md, docs/scenario-format.md)");
}

}  // namespace fullshard::backends
