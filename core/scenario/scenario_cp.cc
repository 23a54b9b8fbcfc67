// The "context_parallel" section of a scenario (docs/scenario-format.md, "Context parallelism")
// and the checks a cp mesh dim needs.
//
// NOTE [What context parallelism composes with]: torchtitan's apply_cp (context_parallel over
// the cp mesh for SDPA, pytorch/torchtitan@69cf2075 train.py create_context_parallel_ctx) on a
// Llama: the sequence split into 2 x cp load-balanced chunks, so seq_len must be divisible by
// 2 x cp, and by tp x 2 x cp with sequence parallelism (ParallelDims.seq_len_divisor); ring
// attention over flash SDPA (PyTorch's CP also dispatches the efficient and cuDNN kernels; the
// simulator runs the flash one). Refused, each naming its field: GPT-2 (learned positions and a
// packed qkv; torchtitan has no GPT-2), another SDPA backend, a mixture-of-experts model (its
// routing assumption counts whole sequences), an uneven batch (the ranks of a cp group share
// their sequences).
#include <string>

#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/scenario_sections.h"

namespace fullshard::scenario_detail {

ContextParallelOptions parse_context_parallel(const nlohmann::json* j, const Scenario& s) {
  namespace jr = json_reader;
  const std::string P = "context_parallel";
  ContextParallelOptions o;
  o.degree = s.fsdp.mesh_size("cp");
  if (j) {
    jr::require_object(*j, P, "{\"rotate_method\": \"allgather\"}");
    check_fields(*j, P);
    if (j->contains("rotate_method"))
      o.rotate_method = jr::get_choice(j->at("rotate_method"), P + ".rotate_method",
                                       {"allgather", "alltoall"}) == "alltoall"
                            ? CpRotateMethod::kAllToAll
                            : CpRotateMethod::kAllGather;
  }
  if (!o.enabled()) {
    if (j)
      throw InputError(P, "is set, but fsdp.mesh has no \"cp\" dim of size 2 or more",
                       "add a cp dim after the shard dim, e.g. \"mesh\": {\"shape\": [2, 4], "
                       "\"dim_names\": [\"dp_shard\", \"cp\"]}, or remove context_parallel");
    return o;
  }
  check_context_parallel(s, o.degree);
  return o;
}

}  // namespace fullshard::scenario_detail

namespace fullshard {

void check_context_parallel(const Scenario& s, int cp) {
  if (cp <= 1) return;
  const std::string C = std::to_string(cp);
  if (s.model.mla.enabled())
    throw InputError("fsdp.mesh.dim_names",
                     "has cp " + C +
                         " with multi-head latent attention, whose ring attention "
                         "is not built yet",
                     "remove the cp dim (docs/models.md)");
  const std::string dims = "fsdp.mesh.dim_names";
  const int tp = s.fsdp.mesh_size("tp");
  const int64_t divisor = int64_t{2} * cp * tp;
  const int64_t seq = s.training.seq_len;
  if (seq % divisor != 0) {
    const int64_t lo = seq / divisor * divisor, hi = lo + divisor;
    throw InputError("training.seq_len",
                     "is " + std::to_string(seq) + ", which " +
                         (tp > 1 ? "tp " + std::to_string(tp) + " x 2 x cp " + C : "2 x cp " + C) +
                         " = " + std::to_string(divisor) +
                         " does not divide (each sequence is cut into 2 x cp load-balanced chunks" +
                         (tp > 1 ? ", each rank's part again over tp" : "") + ")",
                     "use a multiple of " + std::to_string(divisor) + ", e.g. " +
                         std::to_string(lo > 0 ? lo : hi) +
                         (lo > 0 ? " or " + std::to_string(hi) : ""));
  }
  const ModelConfig& m = s.model;
  if (m.arch != ModelArch::kLlama)
    throw InputError(dims,
                     "has a cp dim of size " + C +
                         " for a GPT-2 model (learned positions and a packed qkv; torchtitan's "
                         "context parallelism runs Llama-style decoders)",
                     "use a Llama model, or remove the cp dim");
  if (m.implementation.attention != AttentionImpl::kFlash)
    throw InputError("model.implementation.attention",
                     "is not \"flash\" with a cp dim of size " + C +
                         " (the simulator's ring attention runs flash SDPA rounds)",
                     "use \"flash\", or remove the cp dim");
  if (m.moe.enabled())
    throw InputError(dims,
                     "has a cp dim of size " + C + " for the mixture-of-experts model '" + m.name +
                         "' (its routing assumption counts whole sequences)",
                     "use a dense model, or remove the cp dim");
  if (!s.training.rank_batch.empty())
    throw InputError("training.rank_batch", "is set with a cp dim of size " + C,
                     "the ranks of one cp group share their sequences: remove rank_batch");
}

}  // namespace fullshard
