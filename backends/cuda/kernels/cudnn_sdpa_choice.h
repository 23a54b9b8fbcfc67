// How the CUDA backend picks the cuDNN plan for an attention call, and what it counts (NOTE
// [cuDNN plan choice], cudnn_sdpa_choice.cc). Pure and host-tested: cudnn_sdpa.cc feeds it what
// the frontend says of each heuristic plan.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace fullshard::cuda::cudnn_sdpa {

// What the frontend said of one heuristic plan when asked to build it.
struct PlanOutcome {
  std::string failure;  // empty: it built
  int64_t workspace =
      0;  // when built: get_workspace_size_plan_at_index (the plan's + the frontend's)
};

// The engine workspace to allow (deselect_workspace_greater_than): what the model's block leaves
// once the frontend's node tensors are in it; negative when they alone exceed the block.
int64_t engine_limit(int64_t model_bytes, int64_t frontend_bytes);

struct PlanChoice {
  int64_t index = -1;                // the plan that runs; -1: none, the call declines
  int64_t workspace = 0;             // its get_workspace_size(), <= the model's block
  std::string reason;                // index -1: why, one line
  std::vector<std::string> skipped;  // "plan I: why" for each plan before the chosen one
};
// Asks try_plan(0), try_plan(1), ... (heuristics order, as PyTorch's build_plans) up to `count`,
// and takes the first that built with a workspace of at most model_bytes.
PlanChoice choose_plan(int64_t count, const std::function<PlanOutcome(int64_t)>& try_plan,
                       int64_t model_bytes);

// Why a call declines when the frontend's node tensors alone exceed the model's block, or when
// no plan fits: one line naming the bytes and what the model assumed.
std::string no_plan_reason(const PlanChoice& c, int64_t model_bytes, int64_t frontend_bytes,
                           int64_t model_frontend_bytes);

// NOTE [Attention path counter]: calls of the cuDNN attention kinds by the path that ran them:
// "cudnn forward", "cudnn backward", or "flash DIRECTION: SHAPE: REASON" where cuDNN declined.
class PathCounts {
 public:
  void ran(bool backward);
  void declined(bool backward, const std::string& shape, const std::string& reason);
  // Every path taken so far with its calls, sorted by path.
  std::vector<std::pair<std::string, int64_t>> counts() const;

 private:
  mutable std::mutex m_;
  std::map<std::string, int64_t> by_path_;
};

}  // namespace fullshard::cuda::cudnn_sdpa
