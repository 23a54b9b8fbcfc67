// model.implementation compile = true: what one compiled Llama block keeps for backward equals
// what torch.compile's partitioner saved in tools/measure/compiled_block.json (NOTE [Compiled
// block] in core/model/compiled_block.cc), and eager keeps silu's output on top.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using nlohmann::json;
using testing::TinyOptions;

json measured_case(const std::string& dtype, const std::string& rope) {
  std::ifstream f(std::string(FULLSHARD_SOURCE_DIR) + "/tools/measure/compiled_block.json");
  EXPECT_TRUE(f.good());
  const json j = json::parse(f);
  for (const auto& c : j.at("cases"))
    if (c.at("dtype") == dtype && c.at("rope") == rope) return c;
  ADD_FAILURE() << "no case " << dtype << " / " << rope;
  return json::object();
}

// The block's saved tensors in the measurement: everything the partitioned forward returns
// besides its output, less the parameters and RoPE tables (graph inputs other than the block
// input x, the only 3-D one): FSDP's unsharded parameters cost nothing extra to save.
// The attention's own (q, k, v, out, logsumexp) have the shapes fullshard's flash model saves.
uint64_t measured_saved_bytes(const json& c) {
  uint64_t total = 0;
  for (const auto& s : c.at("saved")) {
    if (!s.contains("bytes")) continue;
    if (s.at("op") == "input" && s.at("shape").size() != 3) continue;
    if (s.at("op") == "_conj.default") continue;  // complex RoPE's freqs_cis table
    // Each as the caching allocator holds it: rounded up to 512 bytes (PyTorch's kMinBlockSize).
    total += (s.at("bytes").get<uint64_t>() + 511) / 512 * 512;
  }
  return total;
}

json model_json(const json& shape, int layers, bool compile, const std::string& rope) {
  return {{"arch", "llama"},
          {"name", "measured-block"},
          {"vocab_size", 256},
          {"dim", shape.at("dim")},
          {"n_layers", layers},
          {"n_heads", shape.at("n_heads")},
          {"n_kv_heads", shape.at("n_kv_heads")},
          {"ffn_dim", shape.at("ffn_dim")},
          {"max_seq_len", shape.at("seq")},
          {"implementation", {{"compile", compile}, {"rope", rope}}}};
}

// The most activation bytes alive at once (at the end of forward and the loss).
uint64_t activation_peak(const json& shape, int layers, bool compile, const std::string& dtype,
                         const std::string& rope) {
  TinyOptions o;
  o.mesh = {1};
  o.steps = 1;
  o.batch = shape.at("batch").get<int>();
  o.seq = shape.at("seq").get<int>();
  if (dtype == "bf16") o.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  json j = testing::tiny_scenario_json(o);
  j["model"] = model_json(shape, layers, compile, rope == "fused" ? "fused" : "complex");
  sim::SimulateOptions so;
  so.max_timeline_points = 1u << 30;  // every point: the activation peak is not downsampled away
  const sim::SimulationReport r = sim::simulate_scenario(parse_scenario(j), so);
  EXPECT_TRUE(r.ok()) << testing::problems_text(r);
  uint64_t peak = 0;
  for (const auto& p : r.classes.at(0).timeline)
    peak = std::max(peak, p.by_category[static_cast<size_t>(MemCategory::kActivation)]);
  return peak;
}

TEST(CompiledBlock, SavesWhatThePartitionerSaved) {
  for (const char* dtype : {"bf16", "fp32"})
    for (const char* rope : {"fused", "complex"}) {
      const json c = measured_case(dtype, rope);
      const json& shape = c.at("shape");
      // One more block keeps one more block's saved tensors alive at the end of forward.
      const uint64_t per_block = activation_peak(shape, 2, true, dtype, rope) -
                                 activation_peak(shape, 1, true, dtype, rope);
      EXPECT_EQ(per_block, measured_saved_bytes(c)) << dtype << " rope " << rope;
      // Eager keeps silu(w1(x)) too: 2 (bf16) or 4 (fp32) bytes per token and ffn_dim element.
      const uint64_t eager = activation_peak(shape, 2, false, dtype, rope) -
                             activation_peak(shape, 1, false, dtype, rope);
      const uint64_t tokens = shape.at("batch").get<uint64_t>() * shape.at("seq").get<uint64_t>();
      EXPECT_EQ(eager - per_block, tokens * shape.at("ffn_dim").get<uint64_t>() *
                                       (std::string(dtype) == "bf16" ? 2 : 4))
          << dtype << " rope " << rope;
    }
}

}  // namespace
}  // namespace fullshard
