#include "simulator/report.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/common/user_text.h"

namespace fullshard::sim {

std::string format_bytes(uint64_t b) {
  const double x = static_cast<double>(b);
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", x / (1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", x / (1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", x / (1ull << 10));
  return fmt::format("{} B", b);
}

namespace {

std::string ranks_label(const std::vector<int>& r) {
  if (r.size() == 1) return fmt::format("rank {}", r[0]);
  bool contiguous = r.back() - r.front() + 1 == static_cast<int>(r.size());
  if (contiguous) return fmt::format("ranks {}-{}", r.front(), r.back());
  return fmt::format("{} ranks ({}, ...)", r.size(), r.front());
}

}  // namespace

nlohmann::json report_json(const SimulationReport& r) {
  using nlohmann::json;
  json j;
  j["scenario"] = r.scenario;
  j["world_size"] = r.world_size;
  j["parameters"] = r.parameters;
  if (r.trainable_parameters > 0) {
    j["trainable_parameters"] = r.trainable_parameters;
    j["lora_parameters"] = r.lora_parameters;
  }
  j["capacity_bytes"] = r.capacity_bytes;
  if (r.symmetric_memory_bytes) j["symmetric_memory_bytes"] = r.symmetric_memory_bytes;
  j["simulated_all_ranks"] = r.simulated_all_ranks;
  j["ok"] = r.ok();
  j["out_of_memory"] = r.out_of_memory;
  j["host_memory_bytes"] = r.host_memory_bytes;
  j["peak_host_bytes_per_node"] = r.peak_host_bytes_per_node;
  j["host_out_of_memory"] = r.host_out_of_memory;
  j["step_time_s"] = r.step_time_s;
  j["steps"] = r.steps;
  j["simulated_steps"] = r.simulated_steps;
  j["extrapolated_steps"] = r.extrapolated_steps;
  j["steady_state"] = r.steady_state;
  j["total_time_s"] = r.total_time_s;
  j["tokens_per_step"] = r.tokens_per_step;
  j["total_tokens"] = r.total_tokens;
  j["exposed_comm_s"] = r.exposed_comm_s;
  j["compute_s"] = r.compute_s;
  j["comm_s"] = r.comm_s;
  j["tokens_per_s_per_gpu"] = r.tokens_per_s_per_gpu;
  j["mfu"] = r.mfu;
  j["model_flops_per_token"] = r.model_flops_per_token;
  j["events_processed"] = r.events_processed;
  j["time_model"] = r.time_model;
  if (r.last_step_rank >= 0) j["last_step"] = step_breakdown_json(r.last_step, r.last_step_rank);
  if (r.pipeline) j["pipeline"] = pipeline_report_json(*r.pipeline);
  if (r.checkpoint) {
    j["checkpoint"] = checkpoint_cost_json(*r.checkpoint);
    j["step_time_with_checkpoint_s"] = r.step_time_with_checkpoint_s();
  }
  json problems = json::array();
  for (const auto& p : r.problems)
    problems.push_back({{"kind", std::string(problem_kind_name(p.kind))},
                        {"message", p.message},
                        {"ranks", p.ranks},
                        {"step", p.step},
                        {"op", p.op}});
  j["problems"] = problems;
  json ranks = json::array(), classes = json::array(), timelines = json::array();
  for (size_t ci = 0; ci < r.classes.size(); ++ci) {
    const auto& c = r.classes[ci];
    json cj = rank_class_json(c);
    classes.push_back(cj);
    for (int rk : c.ranks)
      ranks.push_back({{"rank", rk},
                       {"class", ci},
                       {"peak_allocated_bytes", c.peak_allocated_bytes},
                       {"peak_reserved_bytes", c.peak_reserved_bytes},
                       {"breakdown_at_peak", cj["breakdown_at_peak"]}});
    if (c.timeline.empty()) continue;
    json tl = rank_timeline_json(c, ci);
    timelines.push_back(tl);
  }
  j["ranks"] = ranks;
  j["rank_classes"] = classes;
  j["memory_timeline"] = timelines;
  return j;
}

std::string report_summary(const SimulationReport& r) {
  const double p = static_cast<double>(r.parameters);
  std::string params = p >= 1e9   ? fmt::format("{:.2f} B", p / 1e9)
                       : p >= 1e6 ? fmt::format("{:.1f} M", p / 1e6)
                                  : fmt::format("{}", r.parameters);
  std::string out =
      fmt::format("scenario {}: {} ranks, {} parameters, allocator capacity {} per rank\n",
                  printable(r.scenario), r.world_size, params, format_bytes(r.capacity_bytes));
  if (r.trainable_parameters > 0)
    out += fmt::format("  trainable: {} parameters ({} in LoRA adapters), the rest frozen\n",
                       r.trainable_parameters, r.lora_parameters);
  if (r.symmetric_memory_bytes)
    out += fmt::format(
        "  async TP symmetric memory {} per rank, outside the allocator (not in its capacity)\n",
        format_bytes(r.symmetric_memory_bytes));
  // Ranks with identical memory results print as one line (always so with rank classes;
  // with --ranks all this groups the per-rank results).
  std::vector<std::pair<std::vector<int>, const RankClassReport*>> shown;
  for (const auto& c : r.classes) {
    bool merged = false;
    for (auto& [ranks, rep] : shown)
      if (rep->peak_allocated_bytes == c.peak_allocated_bytes &&
          rep->peak_reserved_bytes == c.peak_reserved_bytes &&
          rep->breakdown_at_peak == c.breakdown_at_peak && rep->moe_at_peak == c.moe_at_peak &&
          rep->peak_host_bytes == c.peak_host_bytes && !rep->oom && !c.oom) {
        ranks.insert(ranks.end(), c.ranks.begin(), c.ranks.end());
        merged = true;
        break;
      }
    if (!merged) shown.emplace_back(c.ranks, &c);
  }
  for (auto& [ranks, cp] : shown) {
    const RankClassReport& c = *cp;
    std::sort(ranks.begin(), ranks.end());
    out += fmt::format("  {}: peak allocated {}, peak reserved {}", ranks_label(ranks),
                       format_bytes(c.peak_allocated_bytes), format_bytes(c.peak_reserved_bytes));
    // Host memory: CPU offload's, and async checkpoint staging while it is held.
    const bool staging = r.checkpoint && r.checkpoint->mode == CheckpointSaveMode::kAsync &&
                         !r.checkpoint->played.empty();
    if (c.peak_host_bytes)
      out += fmt::format(", {} {}",
                         staging ? "host (CPU offload + checkpoint staging)" : "CPU-offloaded",
                         format_bytes(c.peak_host_bytes));
    out += "\n    at peak:";
    for (MemCategory k : kAllMemCategories) {
      uint64_t v = c.breakdown_at_peak[static_cast<int>(k)];
      if (v) out += fmt::format(" {} {},", category_key(k), format_bytes(v));
    }
    if (out.back() == ',') out.pop_back();
    out += "\n";
    if (c.moe_at_peak) {  // NOTE [MoE memory at the peak]
      out += "    of which MoE:";
      for (MoePart p : kAllMoeParts)
        out += fmt::format(" {} {},", moe_part_key(p),
                           format_bytes((*c.moe_at_peak)[static_cast<int>(p)]));
      out.pop_back();
      out += "\n";
    }
    if (!r.init.empty() && !c.oom)
      out += fmt::format(
          "    at start-up (training.init \"{}\"): peak allocated {}, peak reserved {}\n", r.init,
          format_bytes(c.init_peak_allocated_bytes), format_bytes(c.init_peak_reserved_bytes));
    if (c.oom)
      out += fmt::format(
          "    OUT OF MEMORY {} allocating {} for {} ({}): {} allocated, {} reserved of "
          "{}\n",
          c.oom->step < 0 ? std::string("at start-up (training.init)")
                          : fmt::format("in step {}", c.oom->step),
          format_bytes(c.oom->requested_bytes), c.oom->what, c.oom->category,
          format_bytes(c.oom->at_failure.allocated_bytes),
          format_bytes(c.oom->at_failure.reserved_bytes), format_bytes(c.oom->capacity_bytes));
  }
  // NOTE [Host memory per node] (host_memory.h)
  if (r.peak_host_bytes_per_node > 0) {
    if (r.host_out_of_memory)
      out += fmt::format(
          "  HOST OUT OF MEMORY: node {} holds {} of pinned host memory (its ranks' peaks), its "
          "host has {}: "
          "turn CPU offload off, shard over more nodes, or set hardware.host_memory_bytes if yours "
          "has more\n",
          r.peak_host_node, format_bytes(r.peak_host_bytes_per_node),
          format_bytes(r.host_memory_bytes));
    else if (r.host_memory_bytes > 0)
      out +=
          fmt::format("  host memory per node: {} of {} (its ranks' peak host bytes)\n",
                      format_bytes(r.peak_host_bytes_per_node), format_bytes(r.host_memory_bytes));
    else
      out += fmt::format(
          "  host memory per node: {} (its ranks' peak host bytes; not checked: the profile gives "
          "no "
          "host_memory_bytes, set hardware.host_memory_bytes)\n",
          format_bytes(r.peak_host_bytes_per_node));
  }
  if (r.pipeline) out += pipeline_report_text(*r.pipeline);
  if (!r.out_of_memory && r.step_time_s > 0) {
    out += fmt::format(
        "  step time {:.3f} s ({} time model), exposed communication {:.3f} s, "
        "{:.0f} tokens/s/GPU, MFU {:.1f}%\n",
        r.step_time_s, r.time_model, r.exposed_comm_s, r.tokens_per_s_per_gpu, 100 * r.mfu);
    if (r.extrapolated_steps > 0)  // NOTE [Steady state] (extrapolate.cc)
      out += fmt::format(
          "  simulated {} of {} steps; steps {}-{} extrapolated from step {} ({}): whole run "
          "{:.3f} s, {:.0f} tokens\n",
          r.simulated_steps, r.steps, r.simulated_steps + 1, r.steps, r.simulated_steps,
          r.steady_state ? fmt::format("steady: steps {} and {} agree in time and memory",
                                       r.simulated_steps - 1, r.simulated_steps)
                         : "NOT steady: the last two simulated steps differ",
          r.total_time_s, r.total_tokens);
    else
      out += fmt::format("  simulated all {} steps: whole run {:.3f} s, {:.0f} tokens\n", r.steps,
                         r.total_time_s, r.total_tokens);
    if (r.last_step_rank >= 0) {  // where the critical path of the last step runs
      std::string path;
      for (int k = 0; k < kNumPathKinds; ++k) {
        const double v = r.last_step.critical_path_s[static_cast<size_t>(k)];
        if (v > 0.0005 * r.step_time_s)
          path += fmt::format(" {} {:.3f} s,", path_kind_name(static_cast<PathKind>(k)), v);
      }
      if (!path.empty()) path.pop_back();
      out += fmt::format("    critical path (rank {}, last step):{}\n", r.last_step_rank, path);
      // Per mesh dim, when more than the shard dim communicates (HSDP, tensor, pipeline and
      // context parallelism).
      const auto& cd = r.last_step.comm_by_dim_s;
      if (cd[static_cast<size_t>(MeshDimKind::kReplicate)] > 0 ||
          cd[static_cast<size_t>(MeshDimKind::kTp)] > 0 ||
          cd[static_cast<size_t>(MeshDimKind::kPp)] > 0 ||
          cd[static_cast<size_t>(MeshDimKind::kCp)] > 0) {
        std::string dims;
        for (int k = 0; k < kNumMeshDimKinds; ++k)
          if (cd[static_cast<size_t>(k)] > 0)
            dims += fmt::format(" {} {:.3f} s (exposed {:.3f} s),",
                                mesh_dim_kind_name(static_cast<MeshDimKind>(k)),
                                cd[static_cast<size_t>(k)],
                                r.last_step.exposed_comm_by_dim_s[static_cast<size_t>(k)]);
        dims.pop_back();
        out += fmt::format("    communication by mesh dim (last step):{}\n", dims);
      }
    }
  }
  if (r.checkpoint) {  // NOTE [Checkpoint cost]
    const CheckpointCost& c = *r.checkpoint;
    uint64_t largest = 0;
    for (uint64_t b : c.shard_bytes) largest = std::max(largest, b);
    out += fmt::format(
        "  checkpoint every {} steps ({}): {} per rank, device-to-host {:.3f} s, write {:.3f} s "
        "({} per node "
        "at {}/s); exposed {:.3f} s per save = {:.4f} s per step amortised: step time with "
        "checkpoints "
        "{:.3f} s\n",
        c.every, checkpoint_save_mode_name(c.mode), format_bytes(largest), c.d2h_s, c.write_s,
        format_bytes(c.node_bytes), format_bytes(static_cast<uint64_t>(c.storage_write_bandwidth)),
        c.exposed_s, c.amortised_s_per_step, r.step_time_with_checkpoint_s());
    if (c.mode == CheckpointSaveMode::kAsync)
      out += fmt::format(
          "    async: host staging {} per rank (host memory, not in the device figures), {:.3f} s "
          "of "
          "the write hidden behind training\n",
          format_bytes(c.host_staging_bytes), c.hidden_s);
    if (!c.played.empty()) {  // NOTE [Playing a checkpoint save]
      std::string steps;
      double exposed = 0;
      for (const auto& p : c.played) {
        steps += fmt::format("{}{}", steps.empty() ? "" : ", ", p.step);
        exposed = std::max(exposed, p.exposed_s());
      }
      out += fmt::format(
          "    played: {} save(s) after step {} (in the timeline and the host accounts), exposed "
          "up to "
          "{:.3f} s each{}; whole run {:.3f} s with the saves\n",
          c.played.size(), steps, exposed,
          c.played_final_wait_s > 0
              ? fmt::format(", the run's end waits {:.3f} s for the last write",
                            c.played_final_wait_s)
              : "",
          r.total_time_s);
    }
  }
  if (r.out_of_memory && !r.problems.empty())
    out +=
        "  (a rank that runs out of memory stops there: the problems below may only follow from "
        "that)\n";
  for (const auto& p : r.problems) out += "  PROBLEM " + p.message + "\n";
  if (r.ok()) out += "  ok: no collective mismatch, race or use-after-free found\n";
  return out;
}

}  // namespace fullshard::sim
