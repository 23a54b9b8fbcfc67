#include "simulator/planner/plan_report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "core/common/user_text.h"
#include "simulator/planner/families.h"
#include "simulator/planner/search_space.h"

namespace fullshard::planner {

namespace {

// Table cells: "63.50G", "6.0M", "473K".
std::string size_cell(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f}G", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.1f}M", b / (1024.0 * 1024));
  return fmt::format("{:.0f}K", b / 1024.0);
}

std::string params_text(int64_t n) {
  const double x = static_cast<double>(n);
  if (x >= 1e9) return fmt::format("{:.2f} B", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.1f} M", x / 1e6);
  return fmt::format("{:.1f} K", x / 1e3);
}

std::string step_cell(double s) {
  if (s >= 1) return fmt::format("{:.3f}", s);
  if (s >= 1e-3) return fmt::format("{:.2f}ms", s * 1e3);
  return fmt::format("{:.0f}us", s * 1e6);
}

std::string request_line(const PlanOptions& o) {
  const Scenario& s = o.base;
  const int nodes = o.space.gpus / o.space.gpus_per_node;
  return fmt::format("{} ({} parameters) on {} x {} ({} node{} x {}), seq {}, {}, headroom {:.0f}%",
                     printable(s.model.name), params_text(parameter_count(s.model)), o.space.gpus,
                     printable(s.hardware.device.name), nodes, nodes == 1 ? "" : "s",
                     o.space.gpus_per_node, s.training.seq_len,
                     o.space.global_batch
                         ? fmt::format("global batch {} sequences", *o.space.global_batch)
                         : std::string("global batch free (micro-batch x GPUs)"),
                     100 * o.headroom);
}

std::string status(const ConfigResult& c) {
  if (c.fits) return "fits";
  if (c.verdict == Verdict::kTimeBound) return "slower";
  if (c.verdict == Verdict::kMemoryBound) return "OOM>=" + size_cell(c.over_bytes);
  // Fits the GPU, not the node's host memory (NOTE [Host memory per node]).
  if (c.over_host_only()) return "host+" + size_cell(c.host_over_bytes);
  if (!c.out_of_memory) return "over " + size_cell(c.over_bytes);
  return "OOM+" + size_cell(c.over_bytes);
}

}  // namespace

std::string plan_text(const PlanOptions& o, const PlanResult& r, size_t top, double wall_s) {
  std::string out = "plan: " + request_line(o) + "\n";
  if (const auto& ck = o.base.training.checkpoint; ck.every > 0)  // NOTE [Checkpoint cost]
    out += fmt::format(
        "  step times include {} checkpoint every {} steps, amortised (storage {:.3g} bytes/s per "
        "node)\n",
        ck.mode == CheckpointSaveMode::kAsync ? "an async" : "a sync", ck.every,
        ck.storage_write_bandwidth);
  out += fmt::format(
      "  {:>4} {:<16} {:>7} {:<16} {:>7} {:<9} {:>7} {:>4} {:<11} {:>9} {:>8} {:>8} {:>9} {:>6} "
      "{:>8}\n",
      "rank", "mesh", "reshard", "precision", "offload", "AC", "mb x ga", "exp", "status",
      "reserved", "headroom", "step s", "tok/s/GPU", "MFU", "exp.comm");
  for (size_t i = 0; i < r.configs.size() && i < top; ++i) {
    const ConfigResult& c = r.configs[i];
    const Candidate& k = c.candidate;
    const bool exact = c.verdict == Verdict::kSimulated;
    out += fmt::format(
        "  {:>4} {:<16} {:>7} {:<16} {:>7} {:<9} {:>7} {:>4} {:<11} {:>9} {:>8} {:>8} {:>9} {:>6} "
        "{:>8}\n",
        i + 1, mesh_text(k), reshard_text(k.reshard), precision_name(k.precision),
        k.cpu_offload ? "on" : "off", ac_text(k.ac),
        fmt::format("{} x {}", k.micro_batch, k.grad_accum), k.expandable_segments ? "on" : "off",
        status(c),
        exact ? size_cell(c.peak_reserved_bytes) : ">=" + size_cell(c.peak_reserved_bytes),
        c.fits ? size_cell(r.capacity_bytes - c.peak_reserved_bytes) : "-",
        exact && c.step_time_s > 0 ? step_cell(c.step_time_s)
        : c.step_time_s > 0        ? ">=" + step_cell(c.step_time_s)
                                   : "-",
        exact && c.tokens_per_s_per_gpu > 0 ? fmt::format("{:.0f}", c.tokens_per_s_per_gpu)
        : c.verdict == Verdict::kTimeBound  ? fmt::format("<={:.0f}", c.tokens_per_s_per_gpu)
                                            : "-",
        exact && c.mfu > 0 ? fmt::format("{:.1f}%", 100 * c.mfu) : "-",
        exact && c.step_time_s > 0 ? step_cell(c.exposed_comm_s) : "-");
  }
  if (r.configs.empty()) return out + "  (no configurations)\n";
  const ConfigResult& best = r.configs.front();
  if (best.fits) {
    out += fmt::format("recommended: {}\n", candidate_text(best.candidate));
    out += fmt::format(
        "  peak reserved {} of {} (headroom {}), step {}, {:.0f} tokens/s per GPU, MFU {:.1f}%, "
        "exposed "
        "communication {} per step\n",
        bytes_text(best.peak_reserved_bytes), bytes_text(r.capacity_bytes),
        bytes_text(r.capacity_bytes - best.peak_reserved_bytes), seconds_text(best.step_time_s),
        best.tokens_per_s_per_gpu, 100 * best.mfu, seconds_text(best.exposed_comm_s));
  } else {
    if (best.over_host_only())
      out += fmt::format(
          "nothing fits in {} usable per GPU and {} of host memory per node; closest: {} (fits the "
          "GPU, "
          "but a node needs {} of pinned host memory)\n",
          bytes_text(r.usable_bytes), bytes_text(r.host_memory_bytes),
          candidate_text(best.candidate), bytes_text(best.host_bytes_per_node));
    else
      out += fmt::format("nothing fits in {} usable per GPU; closest: {} ({} {})\n",
                         bytes_text(r.usable_bytes), candidate_text(best.candidate),
                         best.verdict == Verdict::kMemoryBound ? "needs at least" : "needs",
                         bytes_text(best.needed_bytes));
  }
  out += "rejected:\n";
  // Selective periods that all run out of memory share one line (OUT.json keeps each).
  std::vector<std::string> oom_periods;
  uint64_t oom_lo = UINT64_MAX, oom_hi = 0;
  bool oom_at_least = false;
  for (const FamilyReason& f : family_reasons(r)) {
    const ConfigResult& b = r.configs[f.best_index];
    if (f.setting == "activation_checkpointing" && f.value.rfind("every ", 0) == 0 && !b.fits &&
        b.verdict != Verdict::kTimeBound &&
        (b.verdict == Verdict::kMemoryBound || b.out_of_memory)) {
      oom_periods.push_back(f.value.substr(6));
      oom_lo = std::min(oom_lo, b.over_bytes);
      oom_hi = std::max(oom_hi, b.over_bytes);
      oom_at_least = oom_at_least || b.verdict == Verdict::kMemoryBound;
      continue;
    }
    out += fmt::format("  {} {}: {}\n", f.setting, f.value, f.reason);
  }
  if (!oom_periods.empty()) {
    std::string ks;
    for (const auto& k : oom_periods) ks += (ks.empty() ? "" : ", ") + k;
    out += fmt::format("  activation_checkpointing every {}: out of memory by {}{}{}\n", ks,
                       oom_at_least ? "at least " : "", bytes_text(oom_lo),
                       oom_hi != oom_lo ? " to " + bytes_text(oom_hi) : "");
  }
  out += fmt::format(
      "evaluated {} configurations in {:.2f} s ({:.0f}/s): {} simulated, {} ruled out by memory "
      "bounds, {} by time "
      "bounds ({} full simulations, {} 2-block bound simulations){}\n",
      r.evaluated, wall_s, wall_s > 0 ? static_cast<double>(r.evaluated) / wall_s : 0.0,
      r.simulated, r.memory_pruned, r.time_pruned, r.programs_simulated, r.proxy_simulations,
      r.pruning ? "" : "; exhaustive");
  return out;
}

nlohmann::json plan_json(const PlanOptions& o, const PlanResult& r, double wall_s) {
  using nlohmann::json;
  json j;
  j["model"] = o.base.model.name;
  j["parameters"] = parameter_count(o.base.model);
  j["gpu"] = o.base.hardware.device.name;
  j["gpus"] = o.space.gpus;
  j["gpus_per_node"] = o.space.gpus_per_node;
  j["seq_len"] = o.base.training.seq_len;
  j["global_batch"] = o.space.global_batch ? json(*o.space.global_batch) : json(nullptr);
  j["headroom"] = o.headroom;
  j["capacity_bytes"] = r.capacity_bytes;
  j["usable_bytes"] = r.usable_bytes;
  j["host_memory_bytes"] = r.host_memory_bytes;
  j["evaluated"] = r.evaluated;
  j["simulated"] = r.simulated;
  j["memory_pruned"] = r.memory_pruned;
  j["time_pruned"] = r.time_pruned;
  j["full_simulations"] = r.programs_simulated;
  j["bound_simulations"] = r.proxy_simulations;
  j["pruning"] = r.pruning;
  j["wall_s"] = wall_s;
  j["configs_per_s"] = wall_s > 0 ? static_cast<double>(r.evaluated) / wall_s : 0.0;
  j["recommended"] =
      r.best_fits() ? candidate_settings_json(r.configs.front().candidate) : json(nullptr);
  json fam = json::array();
  for (const FamilyReason& f : family_reasons(r))
    fam.push_back({{"setting", f.setting},
                   {"value", f.value},
                   {"reason", f.reason},
                   {"best_rank", f.best_index + 1}});
  j["families"] = std::move(fam);
  json cs = json::array();
  for (size_t i = 0; i < r.configs.size(); ++i) {
    const ConfigResult& c = r.configs[i];
    const bool exact = c.verdict == Verdict::kSimulated;
    json e = candidate_settings_json(c.candidate);
    e["rank"] = i + 1;
    e["shard_within_node"] = shard_group_within_node(c.candidate, o.space.gpus_per_node);
    // Unknown (null) for a configuration ruled out by its time bound: it was not simulated.
    e["fits"] = c.verdict == Verdict::kTimeBound ? json(nullptr) : json(c.fits);
    e["verdict"] = verdict_name(c.verdict);
    e["out_of_memory"] = exact                                ? json(c.out_of_memory)
                         : c.verdict == Verdict::kMemoryBound ? json(true)
                                                              : json(nullptr);
    e["peak_reserved_bytes"] = c.peak_reserved_bytes;
    e["peak_allocated_bytes"] = exact ? json(c.peak_allocated_bytes) : json(nullptr);
    e["needed_bytes"] = c.needed_bytes;
    e["over_bytes"] = c.over_bytes;
    e["host_bytes_per_node"] = exact ? json(c.host_bytes_per_node) : json(nullptr);
    e["host_over_bytes"] = exact ? json(c.host_over_bytes) : json(nullptr);
    e["headroom_bytes"] = c.fits ? json(r.capacity_bytes - c.peak_reserved_bytes) : json(nullptr);
    e["step_time_s"] = c.step_time_s > 0 ? json(c.step_time_s) : json(nullptr);
    e["tokens_per_s_per_gpu"] =
        c.tokens_per_s_per_gpu > 0 ? json(c.tokens_per_s_per_gpu) : json(nullptr);
    e["mfu"] = exact && c.mfu > 0 ? json(c.mfu) : json(nullptr);
    e["exposed_comm_s"] = exact ? json(c.exposed_comm_s) : json(nullptr);
    e["compute_s"] = exact ? json(c.compute_s) : json(nullptr);
    e["bound_step_time_s"] = c.bound_step_time_s;
    e["bound_peak_bytes"] = c.bound_peak_bytes;
    cs.push_back(std::move(e));
  }
  j["configs"] = std::move(cs);
  return j;
}

}  // namespace fullshard::planner
