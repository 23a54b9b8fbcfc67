#pragma once
// Runs every rank of a scenario for real on the CPU backend, as threads over one in-process
// gloo HashStore (gloo's own test pattern), and assembles the full parameters from the shards.
#include <gloo/rendezvous/hash_store.h>

#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "runner/backend_factory.h"
#include "runner/rank_runner.h"
#include "core/fsdp/shard_layout.h"
#include "core/model/transformer.h"

namespace fullshard::testing {

struct RealRun {
  std::vector<runner::RankResult> ranks;
  std::map<std::string, std::vector<float>> params;  // fqn -> full tensor (from shard group 0)
  std::map<std::string, std::vector<float>> grads;   // the first step's, with base.collect_grads
  std::vector<double> mean_loss;                       // per step, mean over ranks
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
        bo.record_timeline = false;
        cpu::CpuBackend backend(std::move(bo));
        runner::RankOptions o = base;
        o.steps = steps;
        o.collect_params = true;
        out.ranks[r] = runner::run_rank(backend, s, o);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  // The shard group of rank 0 is ranks 0..S-1 (the last mesh dim varies fastest).
  const int shard = s.fsdp.mesh_shape.back();
  Transformer model(s.model);
  model.root().for_each_param([&](Param& p) {
    std::vector<float> full, grad;
    for (int r = 0; r < shard; ++r) {
      for (auto& [fqn, v] : out.ranks[r].local_params)
        if (fqn == p.fqn) full.insert(full.end(), v.begin(), v.end());
      for (auto& [fqn, v] : out.ranks[r].local_grads)
        if (fqn == p.fqn) grad.insert(grad.end(), v.begin(), v.end());
    }
    out.params[p.fqn] = std::move(full);
    if (base.collect_grads) out.grads[p.fqn] = std::move(grad);
  });
  for (size_t k = 0; k < out.ranks[0].steps.size(); ++k) {
    double sum = 0;
    for (auto& r : out.ranks) sum += r.steps[k].loss;
    out.mean_loss.push_back(sum / world);
  }
  return out;
}

// Largest |a - b| / (atol + rtol |b|) over every element of every parameter (<= 1 passes).
inline double max_violation(const RealRun& a, const RealRun& b, double atol, double rtol, std::string* where) {
  double worst = 0;
  for (auto& [fqn, va] : a.params) {
    const auto& vb = b.params.at(fqn);
    if (va.size() != vb.size()) {
      if (where) *where = fqn + " (size " + std::to_string(va.size()) + " vs " + std::to_string(vb.size()) + ")";
      return 1e30;
    }
    for (size_t i = 0; i < va.size(); ++i) {
      const double diff = std::abs(static_cast<double>(va[i]) - vb[i]);
      double v = diff == 0 ? 0.0 : diff / (atol + rtol * std::abs(static_cast<double>(vb[i])));
      if (!(v <= worst)) {
        worst = std::isnan(v) ? 1e30 : v;
        if (where) *where = fqn + "[" + std::to_string(i) + "]: " + std::to_string(va[i]) + " vs " + std::to_string(vb[i]);
      }
    }
  }
  return worst;
}

}  // namespace fullshard::testing
