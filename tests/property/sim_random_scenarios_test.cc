// Random small models x meshes (1-D and HSDP 2-D; world sizes 1, 2, odd, larger) x policies
// through the simulator, every rank simulated: no collective mismatch, no race, no
// use-after-free, and allocated bytes return to the same value after every step.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "tests/support/sim_support.h"

using namespace fullshard;
using namespace fullshard::testing;
using nlohmann::json;

namespace {

json random_model() {
  bool llama = *rc::gen::arbitrary<bool>();
  int heads = *rc::gen::element(1, 2, 4);
  int head_dim = *rc::gen::element(4, 8);
  json m = {{"arch", llama ? "llama" : "gpt2"},       {"name", "random"},
            {"vocab_size", *rc::gen::inRange(5, 90)}, {"dim", heads * head_dim},
            {"n_layers", *rc::gen::inRange(1, 4)},    {"n_heads", heads},
            {"ffn_dim", *rc::gen::inRange(3, 40)},    {"max_seq_len", 64}};
  if (llama) m["n_kv_heads"] = heads / *rc::gen::element(1, heads);
  return m;
}

}  // namespace

RC_GTEST_PROP(RandomScenarios, NoProtocolProblemsAndSteadyMemory, ()) {
  TinyOptions o;
  // Mesh: world sizes 1, 2, odd, uneven over the vocab; HSDP 2-D.
  if (*rc::gen::inRange(0, 3) == 0) {
    o.mesh = {*rc::gen::inRange(1, 4), *rc::gen::inRange(1, 4)};
  } else {
    o.mesh = {*rc::gen::element(1, 2, 3, 4, 5, 7, 8)};
  }
  const int shard = o.mesh.back();
  std::vector<json> raf = {nullptr, true, false};
  for (int n = 1; n <= shard; ++n)
    if (shard % n == 0) raf.push_back(n);
  o.reshard_after_forward = *rc::gen::elementOf(raf);
  o.mixed_precision =
      *rc::gen::element(json::object(), json{{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}},
                        json{{"param_dtype", "bf16"}}, json{{"param_dtype", "fp16"}},
                        json{{"param_dtype", "bf16"}, {"reduce_dtype", "bf16"}});
  // The root's own output cast (fp32 logits), a per-unit policy (NOTE [Dtype flow between units]:
  // an fp32 output_dtype on every unit would hand the root's norm fp32 activations).
  if (*rc::gen::arbitrary<bool>())
    o.per_unit = {{"root", {{"mixed_precision", {{"output_dtype", "fp32"}}}}}};
  o.cpu_offload = *rc::gen::arbitrary<bool>();
  o.activation_checkpointing = *rc::gen::element(json("none"), json("full"), json("selective_op"),
                                                 json{{"mode", "selective_layer"}, {"every", 2}});
  o.grad_accum_steps = *rc::gen::inRange(1, 4);
  o.units = *rc::gen::element(std::string("blocks"), std::string("root"));
  o.forward_prefetch = *rc::gen::inRange(0, 3);
  o.backward_prefetch = *rc::gen::inRange(1, 4);
  o.max_grad_norm = *rc::gen::element(0.0, 1.0);
  o.steps = 3;
  o.batch = *rc::gen::inRange(1, 3);
  o.seq = *rc::gen::inRange(1, 20);
  json j = tiny_scenario_json(o);
  j["model"] = random_model();
  Scenario s = parse_scenario(j);
  sim::SimulateOptions so;
  so.all_ranks = true;
  auto r = sim::simulate_scenario(s, so);
  RC_LOG() << j.dump() << "\n" << problems_text(r);
  RC_ASSERT(r.problems.empty());
  RC_ASSERT(!r.out_of_memory);
  for (const auto& c : r.classes) {
    RC_ASSERT(c.allocated_after_step.size() == 3u);
    RC_ASSERT(c.allocated_after_step[1] == c.allocated_after_step[0]);
    RC_ASSERT(c.allocated_after_step[2] == c.allocated_after_step[1]);
  }
  RC_ASSERT(r.step_time_s > 0);
}
