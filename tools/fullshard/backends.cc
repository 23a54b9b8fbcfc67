#include "tools/fullshard/backends.h"

#include <cstdlib>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/sgemm_probe.h"
#ifdef FULLSHARD_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/stream_set.h"
#include "backends/cuda/stream_times.h"
#include "core/train/pipeline_program.h"
#endif

namespace fullshard::cli {
namespace {

std::unique_ptr<Backend> make_cpu(const runner::BackendRequest& r) {
  cpu::CpuBackendOptions o;
  o.rank = r.env.rank;
  o.world_size = r.env.world_size;
  o.allocator = r.scenario->hardware.allocator;
  o.store = r.env.store;
  if (o.world_size > 1) o.device = gloo_backend::make_tcp_device(r.env.hostname);
  o.hostname = r.env.hostname;
  o.collectives = r.env.collectives;
  o.batches = r.batches;
  o.record_timeline = r.record_timeline;
  return std::make_unique<cpu::CpuBackend>(std::move(o));
}

#ifdef FULLSHARD_HAVE_CUDA
std::unique_ptr<Backend> make_cuda(const runner::BackendRequest& r) {
  cuda::CudaBackendOptions o;
  o.rank = r.env.rank;
  o.world_size = r.env.world_size;
  o.local_rank = r.env.local_rank;
  o.local_world_size = r.env.local_world_size;
  o.allocator = r.scenario->hardware.allocator;
  o.store = r.env.store;
  o.hostname = r.env.hostname;
  o.collectives = r.env.collectives;
  o.batches = r.batches;
  o.record_timeline = r.record_timeline;
  o.transport = r.transport;
  o.transport_where = "--collectives";
  o.measure_streams = cuda::parse_stream_times(std::getenv("FULLSHARD_CUDA_STREAM_TIMES"));
  o.pipeline_channels = pipeline_p2p_groups(*r.scenario, r.env.rank);
  o.optional_streams =
      cuda::optional_streams_used(r.scenario->pipeline.enabled() ? r.scenario->pipeline.degree : 1,
                                  r.scenario->context_parallel.degree);
  return std::make_unique<cuda::CudaBackend>(std::move(o));
}
#endif

runner::BackendRegistry build() {
  runner::BackendRegistry reg;
  reg.add({"cpu", "CPU processes, collectives over Gloo's TCP transport", make_cpu,
           [] { return -1; },
           [] {
             const cpu::SgemmProbe p = cpu::probe_sgemm();
             return std::make_pair(p.flops_per_s, p.source);
           }});
#ifdef FULLSHARD_HAVE_CUDA
  reg.add({"cuda", "one GPU per rank (LOCAL_RANK), CUDA streams, cuBLASLt, NCCL", make_cuda,
           [] { return cuda::visible_gpu_count(); }, nullptr});
#endif
  return reg;
}

}  // namespace

const runner::BackendRegistry& real_backends() {
  static const runner::BackendRegistry reg = build();
  return reg;
}

}  // namespace fullshard::cli
