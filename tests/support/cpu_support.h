#pragma once
// Runs every rank of a scenario for real on the CPU backend, as threads over one in-process
// gloo HashStore (gloo's own test pattern), and assembles the full parameters from the shards.
#include <gloo/rendezvous/hash_store.h>

#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "runner/backend_factory.h"
#include "runner/checkpoint.h"
#include "runner/rank_runner.h"
#include "core/fsdp/shard_layout.h"
#include "core/model/transformer.h"
#include "core/train/training_program.h"

namespace fullshard::testing {

struct RealRun {
  std::vector<runner::RankResult> ranks;
  std::map<std::string, std::vector<float>> params;  // fqn -> full tensor (from shard group 0)
  std::map<std::string, std::vector<float>> grads;   // the first step's, with base.collect_grads
  std::vector<double> mean_loss;  // per step, mean over ranks (with pp: the last stage's)
};

// `base`: further rank options (checkpointing); steps and collect_params are set here.
// `corpus`: the text kLoadBatch samples (null: the generated corpus).
inline RealRun run_real(const Scenario& s, int steps = -1, const runner::RankOptions& base = {},
                        std::shared_ptr<const TextCorpus> corpus = nullptr) {
  const int world = s.world_size();
  auto store = std::make_shared<::gloo::rendezvous::HashStore>();
  RealRun out;
  out.ranks.resize(static_cast<size_t>(world));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        cpu::CpuBackendOptions bo;
        bo.rank = r;
        bo.world_size = world;
        bo.allocator = s.hardware.allocator;
        bo.store = store;
        if (world > 1) bo.device = gloo_backend::make_tcp_device("127.0.0.1");
        bo.collectives.timeout = std::chrono::seconds(30);
        bo.batches = runner::batch_source(s, corpus);
        if (!base.resume_from.empty())
          runner::resume_data_position(base.resume_from, s, bo.batches);
        const BatchSource batches = bo.batches;  // its position goes into checkpoints
        bo.record_timeline = false;
        cpu::CpuBackend backend(std::move(bo));
        runner::RankOptions o = base;
        o.batches = &batches;
        o.steps = steps;
        o.collect_params = !s.pipeline.enabled();  // pipeline stages: losses only
        out.ranks[r] = runner::run_rank(backend, s, o);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  const std::vector<bool> with_loss = runner::loss_ranks(s);
  for (size_t k = 0; k < out.ranks[0].steps.size(); ++k) {
    double sum = 0;
    int n = 0;
    for (auto& r : out.ranks)
      if (with_loss[static_cast<size_t>(r.rank)]) {
        sum += r.steps[k].loss;
        ++n;
      }
    out.mean_loss.push_back(sum / n);
  }
  if (s.pipeline.enabled()) return out;
  // The full parameters (and gradients) from the ranks of replicate coordinate 0: for each tp
  // index t, the shard group's rows make the tp-local tensor; tp-local tensors are then joined
  // along the parameter's tp placement (dim 0, dim 1, or replicated).
  // With a cp dim FSDP's group is the flattened (shard, cp) one: its rank i is global rank
  // i x tp + t here too (the replicate dim leads).
  const int shard = s.fsdp.mesh_size("shard") * s.fsdp.mesh_size("cp"), tp = s.fsdp.mesh_size("tp");
  std::vector<std::unique_ptr<Transformer>> models;
  // Experts (ep > 1, never with tp): shard rank i holds the experts of ep index i mod ep, its
  // efsdp index i / ep picks their rows (Shard(0)) or every expert's column block (Shard(1)).
  const int ep = s.expert_parallel.degree;
  for (int t = 0; t < tp; ++t)
    models.push_back(std::make_unique<Transformer>(s.model, tensor_parallel_for(s, t),
                                                   expert_parallel_for(s, 0)));
  auto local_of = [](int rank, const std::string& fqn,
                     const std::vector<std::pair<std::string, std::vector<float>>>& v)
      -> const std::vector<float>& {
    for (auto& [f, x] : v)
      if (f == fqn) return x;
    throw std::runtime_error("rank " + std::to_string(rank) + " has no " + fqn);
  };
  using Locals = std::vector<std::pair<std::string, std::vector<float>>> runner::RankResult::*;
  auto assemble = [&](Locals member) {
    std::vector<std::map<std::string, std::vector<float>>> local(static_cast<size_t>(tp));
    for (int t = 0; t < tp; ++t)
      models[static_cast<size_t>(t)]->root().for_each_param([&](Param& p) {
        std::vector<float> rows;
        for (int i = 0; i < shard; ++i)
          for (auto& [fqn, v] : out.ranks[static_cast<size_t>(i * tp + t)].*member)
            if (fqn == p.fqn) rows.insert(rows.end(), v.begin(), v.end());
        local[static_cast<size_t>(t)][p.fqn] = std::move(rows);
      });
    std::map<std::string, std::vector<float>> result;
    models[0]->root().for_each_param([&](Param& p) {
      std::vector<float> full;
      if (p.ep_degree > 1) {
        const int efsdp = shard / ep;
        const int64_t El = p.shape[0], row = numel(p.shape) / El;
        for (int j = 0; j < ep; ++j) {
          std::vector<const std::vector<float>*> parts;
          for (int f = 0; f < efsdp; ++f) {
            auto& rr = out.ranks[static_cast<size_t>(f * ep + j)];
            parts.push_back(&local_of(f * ep + j, p.fqn, rr.*member));
          }
          if (efsdp > El) {  // Shard(1): each expert's row is the efsdp blocks in turn
            const int64_t n = row / efsdp;
            for (int64_t e = 0; e < El; ++e)
              for (const auto* v : parts)
                full.insert(full.end(), v->begin() + e * n, v->begin() + (e + 1) * n);
          } else {
            for (const auto* v : parts) full.insert(full.end(), v->begin(), v->end());
          }
        }
      } else if (p.tp_placement == TpPlacement::kShard1) {
        const int64_t rows = p.shape[0], cols = p.shape[1];
        for (int64_t r = 0; r < rows; ++r)
          for (int t = 0; t < tp; ++t) {
            const auto& v = local[static_cast<size_t>(t)][p.fqn];
            if (static_cast<int64_t>(v.size()) < (r + 1) * cols) continue;
            full.insert(full.end(), v.begin() + r * cols, v.begin() + (r + 1) * cols);
          }
      } else {
        // Shard(0) of tp_blocks stacked blocks (GPT-2's c_attn): block k of the full tensor is
        // every tp index's block k in turn.
        const int parts = p.tp_placement == TpPlacement::kShard0 ? tp : 1;
        const int blocks = p.tp_placement == TpPlacement::kShard0 ? p.tp_blocks : 1;
        for (int k = 0; k < blocks; ++k)
          for (int t = 0; t < parts; ++t) {
            const auto& v = local[static_cast<size_t>(t)][p.fqn];
            const size_t n = v.size() / static_cast<size_t>(blocks);
            full.insert(full.end(), v.begin() + static_cast<std::ptrdiff_t>(k * n),
                        v.begin() + static_cast<std::ptrdiff_t>((k + 1) * n));
          }
      }
      result[p.fqn] = std::move(full);
    });
    return result;
  };
  out.params = assemble(&runner::RankResult::local_params);
  if (base.collect_grads) out.grads = assemble(&runner::RankResult::local_grads);
  return out;
}

// Largest |a - b| / (atol + rtol |b|) over every element of every parameter (<= 1 passes).
// `slack`: per parameter, an amount added to atol (absent: none).
inline double max_violation(const RealRun& a, const RealRun& b, double atol, double rtol,
                            std::string* where,
                            const std::map<std::string, double>* slack = nullptr) {
  double worst = 0;
  for (auto& [fqn, va] : a.params) {
    const auto& vb = b.params.at(fqn);
    const auto extra = slack ? slack->find(fqn) : std::map<std::string, double>::const_iterator{};
    const double tol_abs = atol + (slack && extra != slack->end() ? extra->second : 0.0);
    if (va.size() != vb.size()) {
      if (where)
        *where =
            fqn + " (size " + std::to_string(va.size()) + " vs " + std::to_string(vb.size()) + ")";
      return 1e30;
    }
    for (size_t i = 0; i < va.size(); ++i) {
      const double diff = std::abs(static_cast<double>(va[i]) - vb[i]);
      double v =
          diff == 0 ? 0.0 : diff / (tol_abs + rtol * std::abs(static_cast<double>(vb[i])));
      if (!(v <= worst)) {
        worst = std::isnan(v) ? 1e30 : v;
        if (where)
          *where = fqn + "[" + std::to_string(i) + "]: " + std::to_string(va[i]) + " vs " +
                   std::to_string(vb[i]);
      }
    }
  }
  return worst;
}

}  // namespace fullshard::testing
