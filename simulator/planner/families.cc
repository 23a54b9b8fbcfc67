#include "simulator/planner/families.h"

#include <functional>
#include <set>

#include <fmt/format.h>

namespace fullshard::planner {

namespace {

struct Setting {
  const char* name;
  std::function<std::string(const Candidate&)> value;
};

const std::vector<Setting>& settings() {
  static const std::vector<Setting> s = {
      {"sharding", [](const Candidate& c) { return mesh_text(c); }},
      {"reshard_after_forward", [](const Candidate& c) { return reshard_text(c.reshard); }},
      {"precision", [](const Candidate& c) { return std::string(precision_name(c.precision)); }},
      {"cpu_offload", [](const Candidate& c) { return std::string(c.cpu_offload ? "on" : "off"); }},
      {"activation_checkpointing", [](const Candidate& c) { return ac_text(c.ac); }},
      {"batch",
       [](const Candidate& c) {
         return c.pp > 1 ? fmt::format("mb {} x {} microbatches", c.micro_batch, c.grad_accum)
                         : fmt::format("mb {} x ga {}", c.micro_batch, c.grad_accum);
       }},
      {"expandable_segments",
       [](const Candidate& c) { return std::string(c.expandable_segments ? "on" : "off"); }},
      {"float8", [](const Candidate& c) { return std::string(float8_choice_name(c.float8)); }},
  };
  return s;
}

double tokens(const Candidate& c) { return static_cast<double>(c.micro_batch) * c.grad_accum; }

std::string memory_reason(const ConfigResult& m, const PlanResult& r) {
  const bool bound = m.verdict == Verdict::kMemoryBound;
  if (m.over_host_only())
    return fmt::format("exceeds the node's host memory by {}: its ranks pin {} of {} (best: {})",
                       bytes_text(m.host_over_bytes), bytes_text(m.host_bytes_per_node),
                       bytes_text(r.host_memory_bytes), candidate_text(m.candidate));
  if (m.verdict == Verdict::kSimulated && !m.out_of_memory)
    return fmt::format("exceeds the headroom by {}: peak reserved {} of {} usable (best: {})",
                       bytes_text(m.over_bytes), bytes_text(m.peak_reserved_bytes),
                       bytes_text(r.usable_bytes), candidate_text(m.candidate));
  return fmt::format("out of memory by {}{}: needs {}{} of {} usable (closest: {})",
                     bound ? "at least " : "", bytes_text(m.over_bytes), bound ? "at least " : "",
                     bytes_text(m.needed_bytes), bytes_text(r.usable_bytes),
                     candidate_text(m.candidate));
}

std::string speed_reason(const ConfigResult& m, const ConfigResult& w) {
  const double pct = 100.0 * (1.0 - m.tokens_per_s_per_gpu / w.tokens_per_s_per_gpu);
  const std::string pct_text = pct < 1 ? fmt::format("{:.2f}%", pct) : fmt::format("{:.1f}%", pct);
  if (m.verdict == Verdict::kTimeBound)
    return fmt::format(
        "at least {} slower than the best: its busiest stream alone takes >= {} per step, "
        "at most {:.0f} tokens/s per GPU (best: {})",
        pct_text, seconds_text(m.step_time_s), m.tokens_per_s_per_gpu, candidate_text(m.candidate));
  if (m.tokens_per_s_per_gpu == w.tokens_per_s_per_gpu)
    return fmt::format("as fast, but reserves {} vs {} (best: {})",
                       bytes_text(m.peak_reserved_bytes), bytes_text(w.peak_reserved_bytes),
                       candidate_text(m.candidate));
  // Compare step components at the recommendation's tokens per step.
  const double f = tokens(w.candidate) / tokens(m.candidate);
  const double mc = m.compute_s * f, me = m.exposed_comm_s * f,
               mo = (m.step_time_s - m.compute_s - m.exposed_comm_s) * f;
  const double wc = w.compute_s, we = w.exposed_comm_s,
               wo = w.step_time_s - w.compute_s - w.exposed_comm_s;
  std::string cause;
  if (mc - wc >= me - we && mc - wc >= mo - wo)
    cause = fmt::format("compute takes {} vs {}", seconds_text(mc), seconds_text(wc));
  else if (me - we >= mo - wo)
    cause = fmt::format("exposed communication takes {} vs {}", seconds_text(me), seconds_text(we));
  else
    cause = fmt::format("work outside compute and communication ({}) takes {} vs {}",
                        m.candidate.pp > 1
                            ? "the pipeline bubble, CPU optimizer, host copies, launches, waits"
                            : "CPU optimizer, host copies, launches, waits",
                        seconds_text(mo), seconds_text(wo));
  return fmt::format(
      "{} slower than the best because {} per step{} (best: {})", pct_text, cause,
      f != 1.0 ? fmt::format(" at the best's {:.0f} sequences per GPU", tokens(w.candidate)) : "",
      candidate_text(m.candidate));
}

}  // namespace

std::string bytes_text(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.1f} KiB", b / 1024.0);
}

std::string seconds_text(double s) {
  if (s >= 1 || s == 0) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

std::vector<FamilyReason> family_reasons(const PlanResult& r) {
  std::vector<FamilyReason> out;
  if (r.configs.empty()) return out;
  const ConfigResult& w = r.configs.front();
  for (const Setting& s : settings()) {
    const std::string chosen = s.value(w.candidate);
    std::set<std::string> seen = {chosen};
    for (size_t i = 0; i < r.configs.size(); ++i) {  // rank order: the first of a value is its best
      const ConfigResult& m = r.configs[i];
      const std::string v = s.value(m.candidate);
      if (!seen.insert(v).second) continue;
      FamilyReason f;
      f.setting = s.name;
      f.value = v;
      f.best_index = i;
      f.reason = w.fits && (m.fits || m.verdict == Verdict::kTimeBound) ? speed_reason(m, w)
                                                                        : memory_reason(m, r);
      // Float8's point is throughput: its reasons give both rates (plan --float8).
      if (std::string(s.name) == "float8" && m.verdict == Verdict::kSimulated && m.fits && w.fits)
        f.reason += fmt::format(" ({:.0f} vs {:.0f} tokens/s per GPU)", m.tokens_per_s_per_gpu,
                                w.tokens_per_s_per_gpu);
      out.push_back(std::move(f));
    }
  }
  return out;
}

}  // namespace fullshard::planner
