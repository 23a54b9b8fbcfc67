#include "backends/cpu/rank_runner.h"

#include <chrono>
#include <csignal>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/dtype_io.h"
#include "core/common/error.h"
#include "core/common/intervals.h"
#include "core/memory/timeline_downsample.h"
#include "core/scenario/training_program.h"

namespace fullshard::cpu {

RankResult run_rank(const Scenario& s, const RankOptions& o, const std::function<void(const StepMetrics&)>& on_step,
                    bool collect_params) {
  CpuBackendOptions bo;
  bo.rank = o.rank;
  bo.world_size = s.world_size();
  bo.allocator = s.hardware.allocator;
  bo.store = o.store;
  if (bo.world_size > 1) bo.device = gloo_backend::make_tcp_device(o.hostname);
  bo.collectives = o.collectives;
  bo.corpus = o.corpus ? o.corpus : std::make_shared<const TextCorpus>(TextCorpus::generated(s.training.seed));
  if (static_cast<int64_t>(bo.corpus->text().size()) <= s.training.seq_len)
    throw InputError("training.seq_len", "is " + std::to_string(s.training.seq_len) + ", longer than the corpus",
                     "use a shorter sequence or a longer corpus");
  bo.data_seed = s.training.seed;
  for (int r = 0; r < bo.world_size; ++r) bo.rank_batches.push_back(s.training.batch_for(r));
  bo.record_timeline = o.timeline_points > 0;
  CpuBackend b(std::move(bo));

  RankResult r;
  r.rank = o.rank;
  size_t events_in_steps = 0;
  {
    TrainingProgram prog(b, s);
    b.synchronize_all();  // init kernels are not part of step 0
    b.take_busy_intervals();
    b.take_launched_flops();
    const int steps = o.steps >= 0 ? o.steps : s.training.steps;
    for (int step = 0; step < steps; ++step) {
      if (o.fault != RankOptions::Fault::kNone && step == o.fault_step) {
        if (o.fault == RankOptions::Fault::kKill) ::raise(SIGKILL);
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
      }
      auto t0 = std::chrono::steady_clock::now();
      StepMetrics m;
      m.step = step;
      m.loss = prog.run_step(step);
      m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      m.tokens = s.training.batch_for(o.rank) * s.training.seq_len * s.training.grad_accum_steps;
      m.peak_allocated_bytes = b.memory().allocator_stats().peak_allocated_bytes;
      m.peak_reserved_bytes = b.memory().allocator_stats().peak_reserved_bytes;
      // run_step() ends with a host synchronize on the compute stream, which comes after every
      // other stream's work of the step (FSDP2's final waits): the intervals are the step's.
      auto iv = b.take_busy_intervals();
      std::vector<Interval> comm;
      for (StreamRole role : {StreamRole::kAllGather, StreamRole::kReduceScatter, StreamRole::kAllReduce})
        comm.insert(comm.end(), iv[static_cast<size_t>(role)].begin(), iv[static_cast<size_t>(role)].end());
      const auto& compute = iv[static_cast<size_t>(StreamRole::kDefault)];
      m.compute_s = covered_seconds(compute);
      m.comm_s = covered_seconds(comm);
      m.exposed_comm_s = uncovered_seconds(comm, compute);
      m.flops = b.take_launched_flops();
      r.steps.push_back(m);
      if (on_step) on_step(m);
    }
    b.synchronize_all();
    events_in_steps = b.memory().timeline().size();  // teardown frees are not part of the run
    if (collect_params) {
      for (auto& st : prog.fsdp().states()) {
        if (!st->group) continue;
        for (FSDPParam* p : st->group->fsdp_params()) {
          Tensor local = p->sharded_local();
          std::vector<float> v(static_cast<size_t>(local.numel()));
          detail::load_f32(b.data(local.ref()), local.dtype(), 0, local.numel(), v.data());
          r.local_params.emplace_back(p->param().fqn, std::move(v));
        }
      }
    }
  }
  b.synchronize_all();
  const auto& st = b.memory().allocator_stats();
  r.peak_allocated_bytes = st.peak_allocated_bytes;
  r.peak_reserved_bytes = st.peak_reserved_bytes;
  r.peak_host_bytes = b.memory().peak_host_bytes();
  r.at_peak_allocated = b.memory().at_peak_allocated();
  if (o.timeline_points > 0) {
    const auto& ev = b.memory().timeline();
    const auto& times = b.timeline_times();
    const auto& whats = b.timeline_whats();
    FULLSHARD_CHECK(ev.size() == times.size(), "memory timeline and its times disagree");
    std::vector<uint64_t> alloc(std::min(ev.size(), events_in_steps));
    for (size_t i = 0; i < alloc.size(); ++i) alloc[i] = ev[i].allocated_bytes;
    r.timeline_names = b.timeline_names();
    for (size_t i : downsample_indices(alloc, o.timeline_points)) {
      MeasuredPoint p;
      p.time_s = times[i];
      p.allocated_bytes = ev[i].allocated_bytes;
      p.reserved_bytes = ev[i].reserved_bytes;
      p.host_bytes = ev[i].host_bytes;
      p.by_category = ev[i].by_category;
      p.is_alloc = ev[i].is_alloc;
      p.what = whats[i];
      r.timeline.push_back(p);
    }
  }
  return r;
}

}  // namespace fullshard::cpu
