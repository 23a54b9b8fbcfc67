// The 5-D mesh (pp x dp_replicate x dp_shard x cp x tp) over random sizes: a scenario validates
// exactly when the sizes multiply to the world and seq_len splits into tp x 2 x cp, and each
// rank's groups are DeviceMesh's: the cp group differs only in the cp coordinate, FSDP's group is
// the flattened (dp_shard, cp) one (torchtitan's dp_shard_cp), and the ranks of one cp or tp
// group read the same batch.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/train/training_program.h"

namespace fullshard {
namespace {

using nlohmann::json;

RC_GTEST_PROP(CpMeshProp, ValidatesAndBuildsGroupsAsDeviceMesh, ()) {
  const int pp = *rc::gen::element(1, 2);
  const int rep = *rc::gen::element(1, 2);
  const int shard = *rc::gen::element(1, 2, 3);
  const int cp = *rc::gen::element(2, 3, 4);
  const int tp = *rc::gen::element(1, 2);
  const int world = pp * rep * shard * cp * tp;
  // The GPUs: nodes of up to 8 (the profile's node), sometimes one node too many for the mesh.
  int per_node = 8;
  while (world % per_node != 0) --per_node;
  const bool mismatch = *rc::gen::element(false, false, true);
  const int nodes = world / per_node + (mismatch ? 1 : 0);
  const int64_t k = *rc::gen::inRange(1, 4);
  const int64_t seq = 2 * cp * tp * k + *rc::gen::element(0, 0, 0, 1, tp);
  std::vector<int> shape;
  std::vector<std::string> names;
  if (pp > 1) shape.push_back(pp), names.push_back("pp");
  shape.insert(shape.end(), {rep, shard, cp});
  names.insert(names.end(), {"dp_replicate", "dp_shard", "cp"});
  if (tp > 1) shape.push_back(tp), names.push_back("tp");
  json j = {{"model", "tiny-llama"},
            {"training", {{"batch_per_rank", 2}, {"seq_len", seq}, {"steps", 1}}},
            {"fsdp", {{"mesh", {{"shape", shape}, {"dim_names", names}}}}},
            {"hardware", {{"profile", "h100"}, {"nodes", nodes}, {"gpus_per_node", per_node}}}};
  Scenario s;
  try {
    s = parse_scenario(j);
  } catch (const InputError& e) {
    const std::string w = e.where();
    RC_TAG("refused " + w);
    if (mismatch) {
      RC_ASSERT(w == "fsdp.mesh.shape" || w == "hardware.gpus_per_node");
    } else {
      if (seq % (2 * cp * tp) == 0 || w != "training.seq_len")
        RC_FAIL(std::string("refused a valid mesh: ") + e.what());
    }
    RC_ASSERT(std::string(e.what()).find('\n') == std::string::npos);
    return;
  }
  RC_ASSERT(!mismatch && seq % (2 * cp * tp) == 0);
  RC_ASSERT(s.context_parallel.degree == cp);
  RC_ASSERT(s.fsdp.fsdp_shard_size() == shard * cp);
  const DeviceMesh mesh(s.fsdp.mesh_shape, s.fsdp.mesh_dim_names);
  const int cd = mesh.dim_index("cp"), sd = mesh.dim_index("shard");
  std::set<std::pair<int, int>> dp_of_coords;
  for (int r = 0; r < world; ++r) {
    const MeshInfo m = mesh_info_for(s, r);
    const std::vector<int> c = mesh.coordinates(r);
    RC_ASSERT(m.cp_group.has_value() && m.cp_group->size() == cp);
    RC_ASSERT(m.cp_group->index_of(r) == c[static_cast<size_t>(cd)]);
    for (int member : m.cp_group->ranks) {
      std::vector<int> o = mesh.coordinates(member);
      o[static_cast<size_t>(cd)] = c[static_cast<size_t>(cd)];
      RC_ASSERT(o == c);  // differs only along cp
    }
    RC_ASSERT(m.shard_group.size() == shard * cp);
    RC_ASSERT(m.shard_group.index_of(r) ==
              c[static_cast<size_t>(sd)] * cp + c[static_cast<size_t>(cd)]);
    RC_ASSERT(m.shard_group.ranks == mesh.group(r, {sd, cd}, "x").ranks);
    // The batch: one per (replicate, shard) coordinate, shared over cp, tp and pp.
    RC_ASSERT(m.dp_size == rep * shard);
    for (int member : m.cp_group->ranks) RC_ASSERT(mesh_info_for(s, member).dp_rank == m.dp_rank);
    dp_of_coords.insert({m.dp_rank, m.dp_rank});
    const ContextParallel v = context_parallel_for(s, r);
    RC_ASSERT(v.degree == cp && v.index == c[static_cast<size_t>(cd)]);
  }
  RC_ASSERT(static_cast<int>(dp_of_coords.size()) == rep * shard);
}

}  // namespace
}  // namespace fullshard
