// The expert_parallel section: torchtitan's expert_parallel_degree, with the checks torchtitan's
// ParallelDims and parallelize code make (docs/scenario-format.md, "Expert parallelism").
#include <string>

#include "core/common/error.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/moe_checks.h"
#include "core/scenario/scenario_sections.h"

namespace fullshard::scenario_detail {

static std::string str(int64_t v) { return std::to_string(v); }

// NOTE [What expert parallelism needs]: ParallelDims requires ep to divide dp_shard * cp * tp
// (the sparse region); fullshard has no cp and refuses tp with experts, so ep divides fsdp.mesh's
// shard dim (inside each pipeline stage with a pp dim, as torchtitan's sparse mesh
// (pp, dp_replicate, efsdp, ep) keeps pp outermost), and the experts split evenly
// (ExpertParallel's Shard(0) over ep). When the efsdp degree (shard / ep) exceeds the experts per rank, torchtitan's shard_placement_fn gives the
// experts Shard(1), which FSDP2 supports only for an even split of dim 1 (expert_dim for w1 / w3,
// dim for w2). The split sizes come from one routing assumption applied to every rank, so a
// per-rank batch (training.rank_batch) and int reshard_after_forward (post-forward shards of a
// Shard(1) parameter) are refused until built.
ExpertParallelOptions parse_expert_parallel(const nlohmann::json& j, const Scenario& s) {
  namespace jr = json_reader;
  const std::string P = "expert_parallel";
  if (!j.is_object()) throw InputError(P, "is " + jr::describe(j), "write {\"degree\": 8}");
  check_fields(j, P);
  jr::require_field(j, P, "degree", "give the expert-parallel degree, e.g. {\"degree\": 8}");
  Scenario with = s;
  with.expert_parallel.degree =
      static_cast<int>(field_int(j, P, "degree", 1, kMaxRanksPerDim, "8"));
  if (j.contains("receive_buffers")) {
    const std::string b = jr::get_string(j.at("receive_buffers"), P + ".receive_buffers",
                                         "\"max\"");
    if (b == "routed" || b == "max")
      with.expert_parallel.receive_buffers =
          b == "max" ? ReceiveBuffers::kMax : ReceiveBuffers::kRouted;
    else
      throw InputError(P + ".receive_buffers", "is \"" + b + "\"",
                       "write \"routed\" (sized by the routing assumption, as PyTorch sizes them) "
                       "or \"max\" (the most a rank can receive, as the real backends run)");
  }
  check_expert_parallel(with);
  return with.expert_parallel;
}

}  // namespace fullshard::scenario_detail

namespace fullshard {

const char* receive_buffers_name(ReceiveBuffers b) {
  return b == ReceiveBuffers::kMax ? "max" : "routed";
}

void check_expert_parallel(const Scenario& s) {
  using scenario_detail::str;
  const ExpertParallelOptions o = s.expert_parallel;
  if (o.degree <= 1) return;
  const std::string D = "expert_parallel.degree";
  const MoeConfig& m = s.model.moe;
  if (!m.enabled())
    throw InputError(D, "is " + str(o.degree) + " but the model has no experts",
                     "use 1, or name a mixture-of-experts model (docs/moe.md)");
  if (m.num_experts % o.degree != 0)
    throw InputError(D,
                     "is " + str(o.degree) + ", which does not divide the " + str(m.num_experts) +
                         " experts (model.moe.num_experts)",
                     "use a divisor of " + str(m.num_experts));
  const int shard = s.fsdp.mesh_size("shard");
  if (shard % o.degree != 0)
    throw InputError(D,
                     "is " + str(o.degree) + ", which does not divide the shard dim of " +
                         str(shard) + " ranks (fsdp.mesh; ep is carved out of it)",
                     "use a divisor of " + str(shard));
  if (!s.training.rank_batch.empty())
    throw InputError("training.rank_batch", "is set with expert_parallel.degree " + str(o.degree),
                     "remove it: every rank's split sizes come from one routing assumption");
  if (s.fsdp.reshard_after_forward.kind == ReshardAfterForward::Kind::kInt)
    throw InputError("fsdp.reshard_after_forward",
                     "is an int with expert_parallel.degree " + str(o.degree) +
                         " (post-forward shards of the experts are not built)",
                     "use true or false");
  for (const auto& [unit, raf] : s.fsdp.per_unit_reshard)
    if (raf.kind == ReshardAfterForward::Kind::kInt)
      throw InputError("fsdp.per_unit." + unit + ".reshard_after_forward",
                       "is an int with expert_parallel.degree " + str(o.degree),
                       "use true or false");
  const int efsdp = shard / o.degree;
  const int64_t local = m.num_experts / o.degree;
  if (efsdp > local) {  // Shard(1): dim 1 of w1 / w3 is expert_dim, of w2 the model dim
    for (auto [name, d] : {std::pair<const char*, int64_t>{"model.moe.expert_dim", m.expert_dim},
                           {"model.dim", s.model.dim}})
      if (d % efsdp != 0)
        throw InputError(
            D,
            "is " + str(o.degree) + ": the experts are sharded on dim 1 over efsdp " + str(efsdp) +
                " (more than the " + str(local) + " experts per rank), which needs " + name + " " +
                str(d) + " divisible by " + str(efsdp),
            "choose ep so that shard / ep divides " + str(d) + " or is at most " + str(local));
    // A full tensor is copied into Shard(0) rows only (FSDPParam's init from a full tensor).
    if (s.training.init != ModelInit::kMeta)
      throw InputError("training.init",
                       std::string("is \"") +
                           (s.training.init == ModelInit::kDevice ? "device"
                                                                  : "broadcast_from_rank0") +
                           "\" with experts sharded on dim 1 (efsdp " + str(efsdp) + " > " +
                           str(local) + " experts per rank), which it does not load yet",
                       "use \"meta\", or an ep that leaves efsdp at most the experts per rank");
  }
}

}  // namespace fullshard
