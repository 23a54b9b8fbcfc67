#include "runner/rank_runner.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "core/common/error.h"
#include "core/common/intervals.h"
#include "core/memory/timeline_downsample.h"
#include "core/pipeline/pipeline_schedule.h"
#include "core/report/key_averages.h"
#include "core/report/timeline_times.h"
#include "core/train/training_program.h"
#include "core/tensor/float_convert.h"
#include "runner/checkpoint.h"
#include "runner/checkpoint_saver.h"
#include "runner/init_weights.h"
#include "core/runtime/layer_args.h"

namespace fullshard::runner {
namespace {

// The fp32 values of a floating tensor, read back through Backend::copy_to_host.
std::vector<float> read_f32(Backend& b, const TensorRef& ref) {
  std::vector<uint8_t> bytes(ref.nbytes());
  b.copy_to_host(ref, bytes.data());
  const auto n = static_cast<size_t>(ref.meta.numel());
  std::vector<float> v(n);
  switch (ref.meta.dtype) {
    case DType::kFloat32:
      if (n > 0) std::memcpy(v.data(), bytes.data(), n * 4);  // an empty shard has no data pointer
      break;
    case DType::kBFloat16:
    case DType::kFloat16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        v[i] = ref.meta.dtype == DType::kBFloat16 ? bf16_to_float(h) : fp16_to_float(h);
      }
      break;
    default: FULLSHARD_CHECK(false, "read_f32: not a floating tensor");
  }
  return v;
}

// NOTE [Logits readout]: model(tokens) of the rank's first micro-batch of step `step` (the
// batch TrainingProgram::run_step loads: kLoadBatch with the same arguments), computed as a
// validation pass computes its loss (NOTE [Validation pass]): no graph, the same FSDP hooks,
// units left unsharded resharded after, then copied to the host. Only the test option
// RankOptions::collect_logits runs it.
std::vector<float> first_logits(Backend& b, TrainingProgram& prog, const Scenario& s, int step) {
  FULLSHARD_CHECK(!prog.model().tensor_parallel().enabled(),
                  "collect_logits with tensor parallelism");
  const auto& t = s.training;
  TensorMeta ids{DType::kInt64, {t.batch_for(b.rank()), t.seq_len}};
  Tensor tokens =
      empty_tensor(b, ids, MemCategory::kActivation, StreamRole::kDefault, "logits tokens");
  Tensor labels =
      empty_tensor(b, ids, MemCategory::kActivation, StreamRole::kDefault, "logits labels");
  OpCall load;
  load.kind = OpKind::kLoadBatch;
  load.name = "load logits batch";
  load.outputs = {tokens.ref(), labels.ref()};
  const MeshInfo mi = mesh_info_for(s, b.rank());
  LoadBatchArgs{.step = step,
                .micro_batch = 0,
                .accumulation = t.grad_accum_steps,
                .split = 0,
                .dp_rank = mi.dp_rank,
                .dp_size = mi.dp_size}
      .encode(load);
  b.launch(StreamRole::kDefault, load);
  std::vector<float> out;
  {
    ExecContext c(b, nullptr, &prog.fsdp());
    Value logits = prog.model().logits_forward(c, tokens, {});
    b.synchronize_device();
    out = read_f32(b, logits.t.ref());
  }
  for (auto& st : prog.fsdp().states())
    if (st->group && st->group->is_unsharded()) st->group->reshard();
  prog.fsdp().reset_iter_state();  // a forward no backward follows (NOTE [Validation pass])
  b.synchronize_device();
  return out;
}

// NOTE [Measured timeline]: every allocation and free the host program makes is one event of
// the MemoryTracker's timeline (its allocated / reserved bytes after it); the observer adds
// when it happened on the backend's clock and what it was, in the same order. Its times become
// stream times at the end of the run where the backend reports work starts (NOTE [Measured
// timeline times] in core/report/timeline_times.h). The two lists stay one to one because the
// observer turns the tracker's timeline on as it attaches (a backend created without one, as
// the CUDA backend is by default, recorded no events while the observer recorded times: the
// GPU run's "memory timeline and its times disagree") and remembers where the tracker's list
// stood then (`first_event`: events made before the run are not the run's).
class TimelineObserver {
 public:
  explicit TimelineObserver(Backend& b) : b_(b) {
    b.memory().set_record_timeline(true);
    first_event = b.memory().timeline().size();
    b.set_allocation_observer([this](const Buffer& buf, bool is_alloc, std::string_view what) {
      int32_t id = -1;
      if (is_alloc) {
        auto [it, added] = ids_.emplace(std::string(what), static_cast<int32_t>(names.size()));
        if (added) names.emplace_back(what);
        id = it->second;
        live_[buf.id] = id;
      } else if (auto it = live_.find(buf.id); it != live_.end()) {
        id = it->second;
        live_.erase(it);
      }
      times.push_back(b_.clock_s());
      seqs.push_back(b_.host_seq());
      whats.push_back(id);
    });
  }
  ~TimelineObserver() { b_.set_allocation_observer(nullptr); }
  TimelineObserver(const TimelineObserver&) = delete;
  TimelineObserver& operator=(const TimelineObserver&) = delete;

  std::vector<double>
      times;  // host clock; replaced by stream times (NOTE [Measured timeline times])
  std::vector<uint64_t> seqs;
  std::vector<int32_t> whats;
  std::vector<std::string> names;
  size_t first_event = 0;  // the tracker's timeline entry of this observer's first point

 private:
  Backend& b_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<uint64_t, int32_t> live_;
};

}  // namespace

std::vector<bool> loss_ranks(const Scenario& s) {
  std::vector<bool> out(static_cast<size_t>(s.world_size()), true);
  if (!s.pipeline.enabled()) return out;
  const PipelineScheduleOptions o = s.pipeline.schedule_options();
  const int last = pipeline_stage_rank(o, o.num_stages() - 1);
  for (int r = 0; r < s.world_size(); ++r) {
    const MeshInfo m = mesh_info_for(s, r);
    out[static_cast<size_t>(r)] = m.pp_group && m.pp_group->index_of(r) == last;
  }
  return out;
}

RankResult run_rank(Backend& b, const Scenario& s, const RankOptions& o,
                    const std::function<void(const StepMetrics&)>& on_step) {
  FULLSHARD_CHECK(b.has_data(), "run_rank needs a real backend");
  FULLSHARD_CHECK(
      !s.pipeline.enabled() || !(o.collect_params || o.collect_grads || o.collect_logits),
      "collect_params / collect_grads / collect_logits read one model: not with pp");
  RankResult r;
  r.rank = b.rank();
  std::optional<TimelineObserver> observer;
  if (o.timeline_points > 0) observer.emplace(b);
  size_t events_in_steps = 0;
  RankReport& rep = r.report;
  {
    TrainingProgram prog(b, s);
    rep.init_peak_allocated_bytes = b.memory().allocator_stats().peak_allocated_bytes;
    rep.init_peak_reserved_bytes = b.memory().allocator_stats().peak_reserved_bytes;
    b.synchronize_device();  // init kernels are not part of step 0
    b.take_busy_intervals();
    b.take_collective_intervals();
    b.take_launched_flops();
    b.take_collective_counts();
    const int steps = o.steps >= 0 ? o.steps : s.training.steps;
    // --init-from overrides the scenario's model.weights; a resumed run takes the checkpoint's.
    if (o.resume_from.empty()) {
      if (!o.init_from.empty())
        load_init_weights(b, prog, s, o.init_from);
      else if (!s.model_weights.empty())
        load_init_weights(b, prog, s, s.model_weights, "model.weights");
    }
    const int first =
        o.resume_from.empty() ? 0 : static_cast<int>(load_checkpoint(b, prog, s, o.resume_from));
    std::optional<CheckpointSaver> saver;
    if (o.checkpoint_every > 0)
      saver.emplace(
          b, s, CheckpointSaveOptions{o.checkpoint_dir, o.checkpoint_keep_last, o.checkpoint_mode});
    if (o.collect_logits) r.logits = first_logits(b, prog, s, first);
    b.set_record_launches(o.op_table);
    // Nothing before the first step (init, loaded weights, the logits readout) is any step's op,
    // nor any step's routing (NOTE [Recorded routing]: the simulator plays the steps only).
    b.take_launched_ops();
    b.take_kernel_times();
    RoutingTape* routing = prog.routing();
    if (routing) routing->take();
    if (o.collect_grads)
      prog.set_before_optimizer([&](int) {
        if (!r.local_grads.empty()) return;
        b.synchronize_device();  // the reduce-scatters' results are complete
        for (auto& st : prog.fsdp().states()) {
          if (!st->group) continue;
          for (FSDPParam* p : st->group->fsdp_params())
            r.local_grads.emplace_back(p->param().fqn, p->sharded_grad()
                                                           ? read_f32(b, p->sharded_grad().ref())
                                                           : std::vector<float>());
        }
      });
    for (int step = first; step < steps; ++step) {
      if (o.fault != RankOptions::Fault::kNone && step == o.fault_step) {
        if (o.fault == RankOptions::Fault::kKill) ::raise(SIGKILL);
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
      }
      auto t0 = std::chrono::steady_clock::now();
      const double begin_s = b.clock_s();
      StepMetrics m;
      m.step = step;
      m.loss = prog.run_step(step);
      m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // A tp group trains on one batch: each rank accounts for 1/tp of its tokens (seq_len
      // divides by tp), so the ranks' sum is the global batch; so do the stages of a pipeline.
      m.tokens = s.training.batch_for(b.rank()) * s.training.seq_len * s.training.grad_accum_steps /
                 (s.fsdp.mesh_size("tp") * (s.pipeline.enabled() ? s.pipeline.degree : 1) *
                  s.fsdp.mesh_size("cp"));
      m.peak_allocated_bytes = b.memory().allocator_stats().peak_allocated_bytes;
      m.peak_reserved_bytes = b.memory().allocator_stats().peak_reserved_bytes;
      // run_step() ends with a host synchronize on the compute stream, which comes after every
      // other stream's work of the step (FSDP2's final waits): the intervals are the step's.
      if (auto iv = b.take_busy_intervals()) {
        const StepBreakdown sb =
            measured_step_breakdown(*iv, begin_s, b.clock_s(), b.take_collective_intervals());
        m.compute_s = sb.compute_s;
        m.comm_s = sb.comm_s;
        m.exposed_comm_s = sb.exposed_comm_s;
        for (int k = 0; k < kNumStreams; ++k)
          rep.busy_s[k] += sb.stream_busy_s[static_cast<size_t>(k)];
        rep.compute_s += sb.compute_s;
        rep.comm_s += sb.comm_s;
        rep.exposed_comm_s += sb.exposed_comm_s;
        r.last_step = sb;
      }
      m.flops = b.take_launched_flops();
      if (routing) m.tokens_per_expert = routing->take();
      if (o.op_table) {
        m.ops = key_averages(b.take_launched_ops(), b.take_kernel_times());
      } else {
        b.take_kernel_times();  // the backend keeps them until taken: a long run would grow
      }
      const auto counts = b.take_collective_counts();
      std::copy(counts.begin(), counts.end(), rep.collectives_per_step);
      rep.allocated_after_step.push_back(b.memory().current().allocated_bytes);
      if (o.eval_every > 0 && ((step + 1) % o.eval_every == 0 || step + 1 == steps)) {
        m.eval_loss = prog.eval_loss(o.eval_batches);
        // The validation pass is not part of any step's measurements.
        b.take_busy_intervals();
        b.take_collective_intervals();
        b.take_launched_flops();
        b.take_collective_counts();
        b.take_launched_ops();
        b.take_kernel_times();
        if (routing) routing->take();
      }
      r.steps.push_back(m);
      if (o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0) {
        saver->save(prog, step + 1, o.batches);
        b.take_launched_ops();  // a save's copies are no step's ops
        b.take_kernel_times();
      }
      if (on_step) on_step(m);
    }
    if (saver) {
      saver->finish();  // an async save in flight is committed before the run ends
      r.checkpoint = saver->stats();
    }
    b.synchronize_device();
    b.set_record_launches(false);
    b.take_launched_ops();
    events_in_steps = b.memory().timeline().size();  // teardown frees are not part of the run
    if (observer)
      if (auto starts = b.take_work_starts(); !starts.empty())
        observer->times = timeline_stream_times(observer->seqs, observer->times, std::move(starts));
    rep.instructions = b.host_seq();  // nor are their host-program ticks
    rep.end_time_s = b.clock_s();     // every stream's work is done here
    if (o.collect_params) {
      for (auto& st : prog.fsdp().states()) {
        if (!st->group) continue;
        for (FSDPParam* p : st->group->fsdp_params())
          if (!p->nf4())  // a frozen NF4 base has no bf16 shard (docs/qlora.md): never changes
            r.local_params.emplace_back(p->param().fqn, read_f32(b, p->sharded_local().ref()));
      }
      // An ignored parameter is whole on every rank: shard index 0 reports its rows (all).
      if (mesh_info_for(s, b.rank()).shard_group.index_of(b.rank()) == 0)
        for (const auto& p : prog.fsdp().ignored_params())
          r.local_params.emplace_back(p->param().fqn, read_f32(b, p->data().ref()));
      prog.model().root().for_each_persistent_buffer([&](ModuleBuffer& buf) {
        r.buffers.emplace_back(buf.fqn, read_f32(b, buf.tensor.ref()));
      });
    }
  }
  b.synchronize_device();
  rep.ranks = {b.rank()};
  rep.representative = b.rank();
  const auto& st = b.memory().allocator_stats();
  rep.peak_allocated_bytes = st.peak_allocated_bytes;
  rep.peak_reserved_bytes = st.peak_reserved_bytes;
  rep.allocator = st;
  rep.peak_host_bytes = b.memory().peak_host_bytes();
  rep.breakdown_at_peak = b.memory().at_peak_allocated().by_category;
  if (b.tracks_moe_memory()) rep.moe_at_peak = b.moe_at_peak();
  rep.end_allocated_bytes = rep.allocated_after_step.empty() ? 0 : rep.allocated_after_step.back();
  if (!r.steps.empty()) rep.last_step_s = r.steps.back().seconds;
  if (observer) {
    // The run's events (NOTE [Measured timeline]): from the observer's first on.
    const auto& all = b.memory().timeline();
    const size_t first_event = observer->first_event;
    FULLSHARD_CHECK(all.size() >= first_event && all.size() - first_event == observer->times.size(),
                    "memory timeline and its times disagree");
    const MemoryEvent* ev = all.data() + first_event;
    std::vector<uint64_t> alloc(std::min(all.size() - first_event, events_in_steps - first_event));
    for (size_t i = 0; i < alloc.size(); ++i) alloc[i] = ev[i].allocated_bytes;
    rep.timeline_names = observer->names;
    // NOTE [Routed tokens in the timeline] (core/report/rank_report.h): over every event.
    std::vector<uint64_t> routed(alloc.size());
    RoutedTokenBytes sum;
    const CategoryBytes none{};
    for (size_t i = 0; i < alloc.size(); ++i) {
      const CategoryBytes& before = i                 ? ev[i - 1].by_category
                                    : first_event > 0 ? all[first_event - 1].by_category
                                                      : none;
      const int32_t w = observer->whats[i];
      const std::string_view what = w >= 0 && static_cast<size_t>(w) < observer->names.size()
                                        ? std::string_view(observer->names[w])
                                        : std::string_view();
      routed[i] = sum.after(ev[i], before, what);
    }
    uint64_t highest = 0;
    for (size_t i : downsample_indices(alloc, o.timeline_points)) {
      TimelinePoint p;
      p.time_s = observer->times[i];
      p.allocated_bytes = ev[i].allocated_bytes;
      p.reserved_bytes = ev[i].reserved_bytes;
      p.host_bytes = ev[i].host_bytes;
      p.by_category = ev[i].by_category;
      p.is_alloc = ev[i].is_alloc;
      p.what = observer->whats[i];
      p.routed_bytes = routed[i];
      if (p.allocated_bytes > highest) {
        highest = p.allocated_bytes;
        rep.peak_time_s = p.time_s;
      }
      rep.timeline.push_back(p);
    }
  }
  return r;
}

}  // namespace fullshard::runner
