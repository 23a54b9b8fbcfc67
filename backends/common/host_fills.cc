#include "backends/common/host_fills.h"

#include <cstdint>

#include "core/common/error.h"
#include "core/data/param_init.h"

namespace fullshard::backends {

bool is_host_fill(OpKind kind) { return kind == OpKind::kLoadBatch || kind == OpKind::kInitParam; }

void fill_batch(const OpCall& op, const HostFillContext& ctx, void* tokens, void* labels) {
  FULLSHARD_CHECK(ctx.batches != nullptr, "kLoadBatch '" + op.name + "' without a batch source");
  ctx.batches->fill(op, ctx.rank, ctx.world_size, static_cast<int64_t*>(tokens),
                    static_cast<int64_t*>(labels));
}

bool run_host_fill(const OpCall& op, const HostFillContext& ctx, const std::vector<void*>& out) {
  switch (op.kind) {
    case OpKind::kLoadBatch: fill_batch(op, ctx, out.at(0), out.at(1)); return true;
    case OpKind::kInitParam:  // NOTE [Threaded host init]
      run_init_param(op, out.at(0), host_init_threads());
      return true;
    default: return false;
  }
}

}  // namespace fullshard::backends
