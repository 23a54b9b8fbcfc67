#include "tools/fullshard/backends.h"

#include "backends/cpu/cpu_backend.h"

namespace fullshard::cli {
namespace {

std::unique_ptr<Backend> make_cpu(const runner::BackendRequest& r) {
  cpu::CpuBackendOptions o;
  o.rank = r.env.rank;
  o.world_size = r.env.world_size;
  o.allocator = r.scenario->hardware.allocator;
  o.store = r.env.store;
  if (o.world_size > 1) o.device = gloo_backend::make_tcp_device(r.env.hostname);
  o.collectives = r.env.collectives;
  o.batches = r.batches;
  o.record_timeline = r.record_timeline;
  return std::make_unique<cpu::CpuBackend>(std::move(o));
}

runner::BackendRegistry build() {
  runner::BackendRegistry reg;
  reg.add({"cpu", "CPU processes, collectives over Gloo's TCP transport", make_cpu, [] { return -1; }});
  return reg;
}

}  // namespace

const runner::BackendRegistry& real_backends() {
  static const runner::BackendRegistry reg = build();
  return reg;
}

}  // namespace fullshard::cli
