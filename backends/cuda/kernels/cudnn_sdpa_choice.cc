#include "backends/cuda/kernels/cudnn_sdpa_choice.h"

// NOTE [cuDNN plan choice]: the model gives each cuDNN attention call one workspace block of
// cudnn_sdpa_workspace(...).total() bytes (NOTE [cuDNN SDPA workspace]; the forward's is 0).
// The backend asks the frontend for the heuristics' plans (HeurMode A, PyTorch's order) with the
// engine's workspace capped at what the block leaves after the frontend's node tensors, and runs
// the first that builds within the block, handing it the block: so the memory is the model's
// whatever plan runs, and the plan is PyTorch's first wherever the fit holds. A plan asking more
// is skipped with the frontend's reason ("Requires N"), kept for plans(); when none fits, or the
// frontend's own tensors exceed the block, the call declines with one line (which bytes the
// model gave and what it assumed) and the flash kernels write the same outputs into the same
// memory. Every call is counted by path (NOTE [Attention path counter]) for the run's report.
namespace fullshard::cuda::cudnn_sdpa {

int64_t engine_limit(int64_t model_bytes, int64_t frontend_bytes) {
  return model_bytes - frontend_bytes;
}

PlanChoice choose_plan(int64_t count, const std::function<PlanOutcome(int64_t)>& try_plan,
                       int64_t model_bytes) {
  PlanChoice c;
  for (int64_t i = 0; i < count; ++i) {
    const PlanOutcome o = try_plan(i);
    std::string why = o.failure;
    if (why.empty() && o.workspace > model_bytes)
      why = "its workspace of " + std::to_string(o.workspace) + " bytes exceeds the model's " +
            std::to_string(model_bytes);
    if (why.empty()) {
      c.index = i;
      c.workspace = o.workspace;
      return c;
    }
    c.skipped.push_back("plan " + std::to_string(i) + ": " + why);
  }
  c.reason = count == 0 ? "the heuristics offered no plan" : "no plan within the model's workspace";
  return c;
}

std::string no_plan_reason(const PlanChoice& c, int64_t model_bytes, int64_t frontend_bytes,
                           int64_t model_frontend_bytes) {
  std::string r;
  if (engine_limit(model_bytes, frontend_bytes) < 0)
    r = "the frontend's own tensors take " + std::to_string(frontend_bytes) +
        " bytes, more than the model's " + std::to_string(model_bytes) + "-byte workspace";
  else
    r = c.reason + " of " + std::to_string(model_bytes) + " bytes (frontend " +
        std::to_string(frontend_bytes) + ", leaving " +
        std::to_string(engine_limit(model_bytes, frontend_bytes)) + " for the plan)";
  if (frontend_bytes != model_frontend_bytes)
    r += "; the model assumed " + std::to_string(model_frontend_bytes) + " frontend bytes";
  for (const std::string& s : c.skipped) r += "; " + s;
  r += " (NOTE [cuDNN SDPA workspace])";
  for (char& ch : r)
    if (ch == '\n') ch = ' ';  // one line: the frontend's messages carry newlines
  return r;
}

void PathCounts::ran(bool backward) {
  std::lock_guard<std::mutex> lock(m_);
  ++by_path_[backward ? "cudnn backward" : "cudnn forward"];
}

void PathCounts::declined(bool backward, const std::string& shape, const std::string& reason) {
  std::lock_guard<std::mutex> lock(m_);
  ++by_path_[std::string("flash ") + (backward ? "backward" : "forward") + ": " + shape + ": " +
             reason];
}

std::vector<std::pair<std::string, int64_t>> PathCounts::counts() const {
  std::lock_guard<std::mutex> lock(m_);
  return {by_path_.begin(), by_path_.end()};
}

}  // namespace fullshard::cuda::cudnn_sdpa
