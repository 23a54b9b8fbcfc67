#include "core/model/moe_routing_record.h"

#include <fmt/format.h>

#include "core/common/error.h"

namespace fullshard {

RoutingTape::RoutingTape(std::shared_ptr<const RecordedRouting> record, int rank)
    : record_(std::move(record)), rank_(rank) {
  FULLSHARD_CHECK(record_ && rank >= 0 && static_cast<size_t>(rank) < record_->calls.size(),
                  "RoutingTape: the record has no calls of this rank");
}

std::vector<std::vector<int64_t>> RoutingTape::next(const std::vector<int>& ranks) {
  FULLSHARD_CHECK(replaying(), "RoutingTape::next: not replaying a record");
  const size_t k = next_++;
  std::vector<std::vector<int64_t>> out;
  for (int r : ranks) {
    FULLSHARD_CHECK(r >= 0 && static_cast<size_t>(r) < record_->calls.size(),
                    "RoutingTape::next: a rank outside the record");
    const auto& calls = record_->calls[static_cast<size_t>(r)];
    if (k >= calls.size())
      throw InputError("training.moe_routing.recorded",
                       fmt::format("({}) holds {} MoE layer calls of rank {}, and this scenario "
                                   "runs more (call {} of rank {})",
                                   record_->source, calls.size(), r, k + 1, rank_),
                       "simulate as many steps as the recorded run trained (--steps), with the "
                       "same activation checkpointing and validation");
    out.push_back(calls[k]);
  }
  return out;
}

void RoutingTape::record(std::vector<int64_t> tokens_per_expert) {
  FULLSHARD_CHECK(!replaying(), "RoutingTape::record: replaying a record");
  recorded_.push_back(std::move(tokens_per_expert));
}

std::vector<std::vector<int64_t>> RoutingTape::take() {
  std::vector<std::vector<int64_t>> out;
  out.swap(recorded_);
  return out;
}

}  // namespace fullshard
