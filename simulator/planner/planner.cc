#include "simulator/planner/planner.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>

#include "core/common/error.h"
#include "core/scenario/moe_checks.h"
#include "core/scenario/float8_checks.h"
#include "core/scenario/lora_checks.h"
#include "core/train/training_program.h"
#include "simulator/planner/bounds.h"
#include "simulator/planner/evaluate.h"
#include "simulator/planner/parallel.h"

namespace fullshard::planner {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kSimulated: return "simulated";
    case Verdict::kMemoryBound: return "memory_bound";
    case Verdict::kTimeBound: return "time_bound";
  }
  return "?";
}

namespace {

// Candidates that differ only in checkpointing share their proxies (the proxy fixes the mode).
// (pp candidates have no proxies: NOTE [Pipeline candidates are not bounded].)
using ProxyKey = std::tuple<int, int, int, int, int, int, int, bool, int64_t, int, int, int, int>;
ProxyKey proxy_key(const Candidate& c) {
  return {c.replicate,
          c.shard,
          c.tp,
          c.cp,
          static_cast<int>(c.cp_rotate),
          c.ep,
          static_cast<int>(c.reshard.kind),
          c.reshard.n,
          static_cast<int>(c.precision),
          c.cpu_offload,
          c.micro_batch,
          c.grad_accum,
          static_cast<int>(c.float8)};
}

// A tp group trains on one batch: each of its GPUs accounts for 1/tp of its tokens; a cp
// group's GPUs each hold 1/cp of them.
double tokens_per_gpu(const Candidate& c, int64_t seq_len) {
  return static_cast<double>(c.micro_batch) * static_cast<double>(c.grad_accum) *
         static_cast<double>(seq_len) / static_cast<double>(c.tp) / static_cast<double>(c.cp);
}

// A program that hangs or breaks the protocol (never expected: the simulator's own tests cover
// FSDP2's protocol) is not a recommendation.
bool runs(const ProgramEvaluation& ev) { return !ev.problems && ev.step_time_s > 0; }
// A program that runs and fits: the GPU's usable memory under one allocator setting, and the
// node's host memory (NOTE [Host memory per node]).
bool fits(const ProgramEvaluation& ev, const MemoryOutcome& m, uint64_t usable_bytes) {
  return runs(ev) && ev.host_over_bytes == 0 && !m.out_of_memory &&
         m.peak_reserved_bytes <= usable_bytes;
}

struct Program {
  size_t first = 0;  // index of its expandable-off candidate; first + 1 is expandable on
  Bounds bounds;
  double upper_tps = 0;  // tokens/s per GPU the step-time bound allows
  bool memory_pruned = false;
  std::optional<ProgramEvaluation> eval;
};

// NOTE [Candidate dtype flow]: a candidate's precision replaces fsdp.mixed_precision while the
// scenario's per-unit policies stay, so a precision may make some unit compute on activations
// of another dtype, a program PyTorch refuses (NOTE [Dtype flow between units]): such
// candidates are left out. The flow depends on the precision alone.
std::vector<Candidate> viable_candidates(const PlanOptions& opt) {
  std::vector<Candidate> cands = enumerate_candidates(opt.space);
  // Pipeline candidates the pipeline_parallel section refuses (NOTE [Pipeline candidates] in
  // search_space.cc) are left out; that depends on pp, the schedule and the batch, and for the
  // zero-bubble schedules (split backward) on activation checkpointing, tp and float8 too.
  std::map<std::tuple<int, int, int64_t, int, int, int, int>, bool> pipelines;
  std::erase_if(cands, [&](const Candidate& c) {
    if (c.pp <= 1) return false;
    const bool split = c.pp_schedule == PipelineScheduleKind::kInterleavedZeroBubble ||
                       c.pp_schedule == PipelineScheduleKind::kZBVZeroBubble ||
                       c.pp_schedule == PipelineScheduleKind::kDualPipeV;
    auto [it, fresh] = pipelines.try_emplace(
        {c.pp, static_cast<int>(c.pp_schedule), c.micro_batch, c.grad_accum,
         split ? static_cast<int>(c.ac.mode) : 0, split ? c.tp : 0,
         split ? static_cast<int>(c.float8) : 0},
        true);
    if (fresh) {
      try {
        candidate_scenario(opt.base, c);
      } catch (const InputError&) {
        it->second = false;
      }
    }
    return !it->second;
  });
  // Context-parallel candidates check_context_parallel refuses (NOTE [Context-parallel
  // candidates] in search_space.cc: seq_len not divisible by tp x 2 x cp, ...), checked once per
  // (cp, tp).
  std::map<std::pair<int, int>, bool> cp_ok;
  std::erase_if(cands, [&](const Candidate& c) {
    if (c.cp <= 1) return false;
    auto [it, fresh] = cp_ok.try_emplace({c.cp, c.tp}, true);
    if (fresh) {
      try {
        candidate_scenario(opt.base, c);
      } catch (const InputError&) {
        it->second = false;
      }
    }
    return !it->second;
  });
  std::map<Precision, bool> flows;
  // What training.float8 refuses for a candidate (NOTE [What float8 composes with]: e.g. a
  // weight not splitting evenly over the shard group with the float8 all-gather) is left out,
  // checked once per combination of the settings it depends on.
  std::map<std::tuple<Float8Choice, int, int, bool, int, int>, bool> float8_ok;
  const bool frozen = opt.base.model.lora.enabled() || !opt.base.training.frozen.empty();
  // QLoRA's NF4 base (NOTE [What NF4 composes with]) also depends on the shard size, HSDP, the
  // reshard, offload and the recompute mode: it keys them too (0 without NF4).
  const bool nf4 = opt.base.training.nf4.enabled;
  std::map<std::tuple<Precision, int, int, int, int, int, int, bool, int>, bool> frozen_ok;
  std::erase_if(cands, [&](const Candidate& c) {
    if (c.float8 != Float8Choice::kOff || opt.base.training.float8.enabled()) {
      auto [it, fresh] =
          float8_ok.try_emplace({c.float8, c.shard, c.tp, c.cpu_offload,
                                 static_cast<int>(c.reshard.kind), static_cast<int>(c.ac.mode)},
                                true);
      if (fresh) {
        try {
          check_float8(candidate_scenario(opt.base, c));
        } catch (const InputError&) {
          it->second = false;
        }
      }
      if (!it->second) return true;
    }
    // Frozen parameters and LoRA (NOTE [What frozen parameters compose with]): candidates with
    // a tp, pp or cp dim, or whose compute dtype is not the frozen base's, are left out; with an
    // NF4 base also those it does not run with (HSDP, uneven shards, an int reshard, offload).
    if (frozen) {
      auto [fit, fresh] =
          frozen_ok.try_emplace({c.precision, c.tp, c.pp, c.cp, nf4 ? c.shard : 0,
                                 nf4 ? c.replicate : 0, nf4 ? static_cast<int>(c.reshard.kind) : 0,
                                 nf4 && c.cpu_offload, nf4 ? static_cast<int>(c.ac.mode) : 0},
                                true);
      if (fresh) {
        try {
          check_frozen(candidate_scenario(opt.base, c));
        } catch (const InputError&) {
          fit->second = false;
        }
      }
      if (!fit->second) return true;
    }
    auto it = flows.find(c.precision);
    if (it == flows.end()) {
      bool ok = true;
      try {
        check_dtype_flow(candidate_scenario(opt.base, c));
      } catch (const InputError&) {
        ok = false;
      }
      it = flows.emplace(c.precision, ok).first;
    }
    return !it->second;
  });
  // Candidates an ep does not fit (a shard size it does not divide, an int
  // reshard_after_forward, an uneven Shard(1)) are left out. The check depends on ep, the shard
  // size and reshard_after_forward alone.
  std::map<std::tuple<int, int, int, int>, bool> fits;
  std::erase_if(cands, [&](const Candidate& c) {
    if (c.ep <= 1) return false;
    const auto key = std::make_tuple(c.ep, c.shard, static_cast<int>(c.reshard.kind), c.reshard.n);
    auto it = fits.find(key);
    if (it == fits.end()) {
      bool ok = true;
      try {
        check_expert_parallel(candidate_scenario(opt.base, c));
      } catch (const InputError&) {
        ok = false;
      }
      it = fits.emplace(key, ok).first;
    }
    return !it->second;
  });
  return cands;
}

// One program per pair of candidates differing only in expandable segments (off, then on).
std::vector<Program> pair_programs(const std::vector<Candidate>& cands) {
  std::vector<Program> progs;
  progs.reserve(cands.size() / 2);
  for (size_t i = 0; i < cands.size(); i += 2) {
    FULLSHARD_CHECK(
        !cands[i].expandable_segments && i + 1 < cands.size() && cands[i + 1].expandable_segments,
        "plan: expandable off / on are not adjacent");
    Program p;
    p.first = i;
    progs.push_back(p);
  }
  return progs;
}

// Bounds: one proxy simulation per (program without checkpointing, block mode); each program's
// step-time and memory bounds combine its modes' profiles. Returns the proxies simulated.
size_t bound_programs(std::vector<Program>& progs, const std::vector<Candidate>& cands,
                      const PlanOptions& opt, uint64_t usable_bytes) {
  const int64_t seq = opt.base.training.seq_len;
  const int64_t L = opt.base.model.n_layers;
  std::map<ProxyKey, size_t> key_index;
  std::vector<size_t> key_rep;  // a candidate of each key
  // NOTE [Pipeline candidates are not bounded]: the 2-block proxies model one program for every
  // rank, while pipeline stages run different programs (and the bubble depends on the schedule),
  // so a pp candidate gets no bounds (0: it is always simulated, never pruned).
  for (const Program& p : progs)
    if (cands[p.first].pp <= 1 &&
        key_index.emplace(proxy_key(cands[p.first]), key_rep.size()).second)
      key_rep.push_back(p.first);
  std::vector<std::array<ProxyProfile, 3>> profiles(key_rep.size());
  // Which modes the space needs (every space has none, op and full; kept general).
  std::array<bool, 3> needed{};
  for (const Program& p : progs)
    for (BlockCheckpoint m : block_checkpointing(cands[p.first].ac, L))
      needed[static_cast<int>(m)] = true;
  std::vector<std::pair<size_t, BlockCheckpoint>> jobs;
  for (size_t k = 0; k < key_rep.size(); ++k) {
    // Float8 runs no op-level selective checkpointing (check_float8): no candidate of a float8
    // key has op-checkpointed blocks, so that proxy is neither needed nor runnable.
    const bool float8 =
        cands[key_rep[k]].float8 != Float8Choice::kOff || opt.base.training.float8.enabled();
    for (int m = 0; m < 3; ++m)
      if (needed[m] &&
          !(float8 && static_cast<BlockCheckpoint>(m) == BlockCheckpoint::kOpSelective))
        jobs.push_back({k, static_cast<BlockCheckpoint>(m)});
  }
  std::atomic<size_t> done{0};
  std::mutex progress_mu;
  // The parameter rows of the full model and of its 2-block proxy, built once per model. A
  // candidate's model is the base's with its own loss_chunks (candidate_scenario changes
  // nothing else in it), so that count tells the models apart.
  struct Rows {
    ParamRows full, proxy;
  };
  std::map<int64_t, Rows> rows;
  for (size_t k = 0; k < key_rep.size(); ++k) {
    const Scenario cs = candidate_scenario(opt.base, cands[key_rep[k]]);
    const ModelConfig& model = cs.model;
    auto [it, added] = rows.try_emplace(model.implementation.loss_chunks);
    if (!added) continue;
    ModelConfig proxy = model;
    proxy.n_layers = 2;
    it->second = Rows{param_rows(model), param_rows(proxy)};
  }
  parallel_for(jobs.size(), opt.threads, [&](size_t j) {
    const auto [k, m] = jobs[j];
    const Scenario s = candidate_scenario(opt.base, cands[key_rep[k]]);
    const Rows& r = rows.at(s.model.implementation.loss_chunks);
    profiles[k][static_cast<int>(m)] = profile_proxy(s, m, &r.full, &r.proxy);
    const size_t d = ++done;
    if (opt.progress) {
      std::lock_guard<std::mutex> l(progress_mu);
      opt.progress(d, jobs.size(), "bounds");
    }
    return true;
  });
  for (Program& p : progs) {
    const Candidate& c = cands[p.first];
    if (c.pp > 1) {
      p.upper_tps = 1e300;
      continue;
    }
    const auto& prof = profiles[key_index.at(proxy_key(c))];
    std::array<const ProxyProfile*, 3> ptrs{};
    for (int m = 0; m < 3; ++m)
      if (needed[m]) ptrs[m] = &prof[m];
    p.bounds = combine_bounds(ptrs, block_checkpointing(c.ac, L));
    p.upper_tps = p.bounds.step_time_s > 0 ? tokens_per_gpu(c, seq) / p.bounds.step_time_s : 1e300;
    p.memory_pruned = p.bounds.peak_bytes > usable_bytes;
  }
  return jobs.size();
}

// What the search found: the best tokens/s per GPU of a fitting candidate (0: none fits) and,
// when none fits, the smallest exact overflow.
struct SearchOutcome {
  double best = 0;
  uint64_t closest = UINT64_MAX;
  size_t ran = 0;  // programs simulated
};

// Simulates the programs in order of the best tokens/s each could reach, skipping those whose
// bound cannot beat the best found (NOTE [Branch and bound]). Nothing fits: the recommendation
// is the candidate closest to fitting, so the candidates ruled out by memory are simulated
// too, in order of their memory bound, until the bound passes the smallest exact overflow
// found (the same branch and bound, on memory).
SearchOutcome search(std::vector<Program>& progs, const std::vector<Candidate>& cands,
                     const PlanOptions& opt, const PlanResult& res) {
  std::vector<size_t> order;
  for (size_t i = 0; i < progs.size(); ++i)
    if (!progs[i].memory_pruned) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return progs[a].upper_tps > progs[b].upper_tps; });
  std::mutex mu;
  SearchOutcome out;
  std::atomic<size_t> done{0};
  std::atomic<size_t> ran{0};
  parallel_for(order.size(), opt.threads, [&](size_t k) {
    Program& p = progs[order[k]];
    {
      std::lock_guard<std::mutex> l(mu);
      if (res.pruning && p.upper_tps < out.best) return false;  // nothing later can win
    }
    ProgramEvaluation ev = evaluate_program(candidate_scenario(opt.base, cands[p.first]));
    ++ran;
    std::lock_guard<std::mutex> l(mu);
    for (const MemoryOutcome& m : ev.memory)
      if (fits(ev, m, res.usable_bytes)) out.best = std::max(out.best, ev.tokens_per_s_per_gpu);
    p.eval = std::move(ev);
    if (opt.progress) opt.progress(++done, order.size(), "simulate");
    return true;
  });
  if (out.best == 0 && res.pruning) {
    auto over = [&](const ProgramEvaluation& ev) {
      uint64_t o = UINT64_MAX;
      for (const MemoryOutcome& m : ev.memory)
        o = std::min(o, m.needed_reserved_bytes > res.usable_bytes
                            ? m.needed_reserved_bytes - res.usable_bytes
                            : 0);
      return o;
    };
    for (const Program& p : progs)
      if (p.eval) out.closest = std::min(out.closest, over(*p.eval));
    std::vector<size_t> by_memory;
    for (size_t i = 0; i < progs.size(); ++i)
      if (progs[i].memory_pruned) by_memory.push_back(i);
    std::stable_sort(by_memory.begin(), by_memory.end(), [&](size_t a, size_t b) {
      return progs[a].bounds.peak_bytes < progs[b].bounds.peak_bytes;
    });
    parallel_for(by_memory.size(), opt.threads, [&](size_t k) {
      Program& p = progs[by_memory[k]];
      {
        std::lock_guard<std::mutex> l(mu);
        if (p.bounds.peak_bytes - res.usable_bytes > out.closest) return false;
      }
      ProgramEvaluation ev = evaluate_program(candidate_scenario(opt.base, cands[p.first]));
      ++ran;
      std::lock_guard<std::mutex> l(mu);
      out.closest = std::min(out.closest, over(ev));
      p.eval = std::move(ev);
      return true;
    });
  }
  out.ran = ran;
  if (opt.progress && !order.empty())
    opt.progress(order.size(), order.size(), "simulate");  // the search is done
  return out;
}

// One candidate's result from its program (e: 0 expandable segments off, 1 on).
ConfigResult config_result(const Program& p, const Candidate& cand, int e,
                           const SearchOutcome& found, const PlanResult& res) {
  ConfigResult r;
  r.candidate = cand;
  r.bound_step_time_s = p.bounds.step_time_s;
  r.bound_peak_bytes = p.bounds.peak_bytes;
  if (p.memory_pruned &&
      !(p.eval && found.best == 0 && p.bounds.peak_bytes - res.usable_bytes <= found.closest)) {
    r.verdict = Verdict::kMemoryBound;
    r.peak_reserved_bytes = r.needed_bytes = p.bounds.peak_bytes;
    r.over_bytes = p.bounds.peak_bytes - res.usable_bytes;
  } else if (!p.eval || (res.pruning && p.upper_tps < found.best)) {
    r.verdict = Verdict::kTimeBound;
    r.peak_reserved_bytes = p.bounds.peak_bytes;
    r.step_time_s = p.bounds.step_time_s;
    r.tokens_per_s_per_gpu = p.upper_tps;
  } else {
    const MemoryOutcome& m = p.eval->memory[e];
    r.verdict = Verdict::kSimulated;
    r.out_of_memory = m.out_of_memory;
    r.fits = fits(*p.eval, m, res.usable_bytes);
    r.peak_reserved_bytes = m.peak_reserved_bytes;
    r.peak_allocated_bytes = m.peak_allocated_bytes;
    r.needed_bytes = m.needed_reserved_bytes;
    r.host_bytes_per_node = p.eval->host_bytes_per_node;
    r.host_over_bytes = p.eval->host_over_bytes;
    r.over_bytes =
        m.needed_reserved_bytes > res.usable_bytes ? m.needed_reserved_bytes - res.usable_bytes : 0;
    if (r.fits) r.over_bytes = 0;
    r.step_time_s = p.eval->step_time_s;
    r.tokens_per_s_per_gpu = p.eval->tokens_per_s_per_gpu;
    r.mfu = p.eval->mfu;
    r.compute_s = p.eval->compute_s;
    r.exposed_comm_s = p.eval->exposed_comm_s;
  }
  return r;
}

// Results (NOTE [Branch and bound]: reported as simulated only when upper bound >= best),
// fitting ones first by tokens/s, then the time-bound ones, then the rest by overflow.
void assemble_results(const std::vector<Program>& progs, const std::vector<Candidate>& cands,
                      const SearchOutcome& found, PlanResult& res) {
  std::vector<ConfigResult> configs;
  configs.reserve(progs.size() * 2);
  for (const Program& p : progs)
    for (int e = 0; e < 2; ++e)
      configs.push_back(config_result(p, cands[p.first + e], e, found, res));
  auto group = [](const ConfigResult& r) {
    return r.fits ? 0 : r.verdict == Verdict::kTimeBound ? 1 : 2;
  };
  std::vector<size_t> idx(configs.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const ConfigResult &x = configs[a], &y = configs[b];
    if (group(x) != group(y)) return group(x) < group(y);
    if (group(x) == 2) return x.over_bytes < y.over_bytes;
    if (x.tokens_per_s_per_gpu != y.tokens_per_s_per_gpu)
      return x.tokens_per_s_per_gpu > y.tokens_per_s_per_gpu;
    return x.peak_reserved_bytes <
           y.peak_reserved_bytes;  // equally fast: the one leaving more headroom
  });
  res.configs.reserve(idx.size());
  for (size_t i : idx) res.configs.push_back(std::move(configs[i]));
  res.evaluated = res.configs.size();
  for (const auto& r : res.configs) {
    if (r.verdict == Verdict::kSimulated) ++res.simulated;
    if (r.verdict == Verdict::kMemoryBound) ++res.memory_pruned;
    if (r.verdict == Verdict::kTimeBound) ++res.time_pruned;
  }
}

}  // namespace

// In four parts: the viable candidates, their bounds, the branch-and-bound search, the results.
PlanResult plan(const PlanOptions& given) {
  // Every candidate and proxy copies the base scenario (and every simulation its hardware
  // profile): without the profile's citations (about 9 KB of text the simulator never reads)
  // those copies allocate far less.
  PlanOptions opt = given;
  opt.base.hardware.device.source.clear();
  opt.base.hardware.device.source.shrink_to_fit();
  // No ep degrees given: the base scenario's (1 when it sets none).
  if (opt.space.ep_degrees.empty()) opt.space.ep_degrees = {opt.base.expert_parallel.degree};
  check_space_options(opt.space);
  if (!(opt.headroom >= 0 && opt.headroom < 1))
    throw InputError("--headroom", "is " + std::to_string(opt.headroom),
                     "give the fraction of GPU memory to keep free, in [0, 1), e.g. 0.05");
  FULLSHARD_CHECK(opt.base.world_size() == opt.space.gpus, "plan: base scenario world != --gpus");
  if (opt.base.pipeline.enabled())  // docs/pipeline.md, "Not built yet"
    throw InputError("fsdp.mesh.dim_names", "has a pp dim, which the planner chooses",
                     "plan from a scenario without the pp dim and give --pp");
  const std::vector<Candidate> cands = viable_candidates(opt);
  const int64_t L = opt.base.model.n_layers;

  PlanResult res;
  res.capacity_bytes = opt.base.hardware.allocator.capacity_bytes;
  res.host_memory_bytes = opt.base.hardware.device.host_memory_bytes;
  res.usable_bytes =
      static_cast<uint64_t>(static_cast<double>(res.capacity_bytes) * (1.0 - opt.headroom));
  // Ranks of different speeds or batches run different programs (every rank is simulated),
  // which the block bounds do not model: such a base is searched exhaustively.
  res.pruning = opt.prune && L >= 2 && opt.base.hardware.rank_speed.empty() &&
                opt.base.training.rank_batch.empty();

  std::vector<Program> progs = pair_programs(cands);
  if (res.pruning) res.proxy_simulations = bound_programs(progs, cands, opt, res.usable_bytes);
  const SearchOutcome found = search(progs, cands, opt, res);
  res.programs_simulated = found.ran;
  assemble_results(progs, cands, found, res);
  return res;
}

}  // namespace fullshard::planner
