// PyTorch as the numerics oracle (issue 12, item 4): tools/oracle/oracle.py trained tiny
// Hugging Face LlamaForCausalLM / GPT2LMHeadModel models (tools/oracle/moe_oracle.py: Mixtral,
// Qwen3-MoE and DeepSeek-V3 mixtures of experts) 3 steps in PyTorch and stored the
// weights, batches, losses, first-step gradients and final parameters under
// tests/data/oracle/. Here the same scenario (model.hf_config + model.weights) trains on the
// CPU backend, on 1 rank and sharded over 2, 3 and 4 ranks, and must compute what PyTorch
// computed: the logits of the first sequence of the first step (read out by
// runner::RankOptions::collect_logits, NOTE [Logits readout]), the losses, the first step's
// gradients and the parameters after 3 steps.
//
// NOTE [Oracle tolerances]: fp32 kernels that compute what PyTorch's compute differ only in
// summation order (matmul blocking, the reduce-scatter over ranks, double accumulators), a few ulps
// per op.
// - loss: within 1e-5 relative.
// - logits and first-step gradients, per element: |fullshard - torch| <= 1e-5 |torch| + 1e-5
//   max|torch| over the tensor (the second term covers sums of cancelling terms; `ORACLE_VERBOSE=1`
//   prints the margin per tensor).
// - parameters after 3 AdamW steps: the update (param - initial) within 2e-4 of its norm per
//   tensor: Adam moves an element with a small gradient by up to lr whatever its size, carrying
//   that gradient's relative error into the update.
// bf16 (FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) on both sides) rounds at
// points that differ between Hugging Face's modules and fullshard's kernels: two independent
// roundings, so fullshard may be twice PyTorch's own bf16 error (its distance from PyTorch's fp32
// run): per gradient tensor ||g - g_torch|| <= max(1e-2, 2 ||g_torch - g_torch32||) relative to
// ||g_torch|| (the logits alike), each loss within max(2e-3, 2 |loss_torch / loss_torch32 - 1|).
// Measured margins: docs/checkpoints.md, "Oracle tolerances in full".
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>

#include <gtest/gtest.h>

#include "core/checkpoint/hf_names.h"
#include "core/checkpoint/safetensors.h"
#include "core/common/json_file.h"
#include "runner/init_weights.h"
#include "tests/support/cpu_support.h"

namespace fullshard {
namespace {
using namespace fullshard::testing;
using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kOracle = fs::path(FULLSHARD_SOURCE_DIR) / "tests" / "data" / "oracle";

// reference.safetensors of one case.
class Reference {
 public:
  explicit Reference(const fs::path& dir, const char* file = "reference.safetensors")
      : r_((dir / file).string()) {}
  bool has(const std::string& name) const { return r_.header().find(name) != nullptr; }
  std::vector<float> f32(const std::string& name) const {
    const auto bytes = r_.read_all(name);
    EXPECT_EQ(r_.entry(name).dtype, "F32") << name;
    std::vector<float> v(bytes.size() / 4);
    if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }
  std::vector<int64_t> i64(const std::string& name) const {
    const auto bytes = r_.read_all(name);
    std::vector<int64_t> v(bytes.size() / 8);
    if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }
  std::string meta(const std::string& key) const {
    auto it = r_.header().metadata.find(key);
    return it == r_.header().metadata.end() ? "" : it->second;
  }

 private:
  SafetensorsReader r_;
};

using Edit = std::function<void(json&)>;

// The case's scenario on `world` ranks, changed by `edit` (the global batch of 12 sequences
// split over the ranks and the micro-batches).
Scenario case_scenario(const fs::path& dir, int world, const Edit& edit, int tp = 1) {
  json j = read_json_input((dir / "scenario.json").string(), "an oracle scenario");
  const int64_t global = j["training"]["batch_per_rank"].get<int64_t>();
  if (edit) edit(j);
  j["training"]["batch_per_rank"] =
      global / (world / tp) / j["training"].value("grad_accum_steps", 1);
  j["fsdp"]["mesh"]["shape"] = {world};
  if (tp > 1)
    j["fsdp"]["mesh"] = {{"shape", {world / tp, tp}},
                         {"dim_names", {"dp_shard", "tp"}}};  // a tp group shares a batch
  j["hardware"]["gpus_per_node"] = world;
  return parse_scenario(j, dir.string());
}

// The reference's tensor `prefix` + the Hugging Face name of parameter `fqn` in fullshard's layout:
// a routed experts' weight stacks its experts' tensors (NOTE [Hugging Face names of experts]).
std::vector<float> reference_of(const Reference& ref, const std::string& prefix,
                                const Scenario& s, const std::string& fqn, int64_t experts) {
  const auto hf = hf_tensor_name(hf_arch(s.model), fqn);
  EXPECT_TRUE(hf.has_value()) << fqn;
  if (!hf) return {};
  if (!hf->per_expert) return ref.f32(prefix + hf->name);
  std::vector<float> v;
  for (int64_t e = 0; e < experts; ++e) {
    const auto one = ref.f32(prefix + hf->expert_name(e));
    v.insert(v.end(), one.begin(), one.end());
  }
  return v;
}

// The global dim 0 of parameter `fqn` (a routed experts' weight: its expert count).
int64_t dim0_of(const Scenario& s, const std::string& fqn) {
  Transformer model(s.model);
  int64_t d0 = 0;
  model.root().for_each_param([&](Param& p) {
    if (p.fqn == fqn) d0 = p.global_shape().at(0);
  });
  return d0;
}

// fullshard's parameter `fqn` in the reference's layout (GPT-2's Conv1D weights are [in, out];
// rotary rows of the other RoPE pairing move back: NOTE [Rotary pairing of weight files]).
std::vector<float> hf_layout(const Scenario& s, const std::string& fqn, const std::vector<float>& v) {
  const auto hf = hf_tensor_name(hf_arch(s.model), fqn);
  EXPECT_TRUE(hf.has_value()) << fqn;
  const int64_t rows = dim0_of(s, fqn);
  if (const auto order = hf_rope_row_order(s.model, fqn, rows); !order.empty()) {
    const size_t cols = v.size() / static_cast<size_t>(rows);
    std::vector<float> out(v.size());
    for (size_t r = 0; r < order.size(); ++r)
      std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(r * cols), cols,
                  out.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(order[r]) * cols));
    return out;
  }
  if (!hf || !hf->transpose) return v;
  Transformer model(s.model);
  Shape shape;
  model.root().for_each_param([&](Param& p) {
    if (p.fqn == fqn) shape = p.shape;
  });
  const int64_t out = shape[0], in = shape[1];
  std::vector<float> t(v.size());
  for (int64_t r = 0; r < out; ++r)
    for (int64_t c = 0; c < in; ++c)
      t[static_cast<size_t>(c * out + r)] = v[static_cast<size_t>(r * in + c)];
  return t;
}

// Largest |a - b| / (rtol |b| + atol max|b|) over a tensor (<= 1 passes); where: the element.
double elementwise_violation(const std::vector<float>& a, const std::vector<float>& b, double rtol,
                             double atol, size_t* where) {
  double scale = 0, worst = 0;
  for (float x : b) scale = std::max(scale, std::abs(static_cast<double>(x)));
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - b[i]);
    const double v = d == 0 ? 0 : d / (rtol * std::abs(static_cast<double>(b[i])) + atol * scale);
    if (!(v <= worst)) {
      worst = std::isnan(v) ? 1e30 : v;
      *where = i;
    }
  }
  return worst;
}

double norm_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    n += static_cast<double>(b[i]) * b[i];
  }
  return n == 0 ? std::sqrt(d) : std::sqrt(d / n);
}

struct Tolerance {
  bool bf16 = false;  // norm-relative, against the distance of the fp32 case from the reference
  double loss_rtol = 1e-5;
  // With bf16: allowed = max(floor, factor * |reference - fp32 case|), the fp32 case named
  // fp32_case (default: the name without "-bf16").
  double floor = 1e-2, factor = 2.0;
  std::string fp32_case;
};

void check_case(const std::string& name, int world, const Tolerance& tol, const Edit& edit = {},
                int tp = 1) {
  SCOPED_TRACE(name + " on " + std::to_string(world) + " ranks, tp " + std::to_string(tp));
  const fs::path dir = kOracle / name;
  const Reference ref(dir);
  const Scenario s = case_scenario(dir, world, edit, tp);
  ASSERT_FALSE(s.model_weights.empty()) << "the oracle scenario names its weights (model.weights)";
  auto corpus =
      std::make_shared<const TextCorpus>(TextCorpus::from_file((kOracle / "corpus.txt").string()));
  const int steps = std::stoi(ref.meta("steps"));

  // The batches: fullshard's sampler must give the windows the script reproduced.
  const auto tokens = ref.i64("tokens"), labels = ref.i64("labels");
  const int64_t B = world / tp * s.training.batch_per_rank * s.training.grad_accum_steps,
                S = s.training.seq_len;
  for (int step = 0; step < steps; ++step) {
    std::vector<int64_t> t(static_cast<size_t>(B * S)), l(t.size());
    corpus->fill_batch(s.training.seed, step, 0, B, S, t.data(), l.data());
    ASSERT_TRUE(std::equal(t.begin(), t.end(), tokens.begin() + step * B * S) &&
                std::equal(l.begin(), l.end(), labels.begin() + step * B * S))
        << "step " << step
        << ": fullshard's batch differs from the reference's; if the sampler changed on "
        << "purpose, rerun tools/oracle/oracle.py (tools/oracle/README.md)";
  }

  runner::RankOptions o;
  o.collect_grads = true;
  o.collect_logits = tp == 1;  // the readout refuses tensor parallelism (NOTE [Logits readout])
  const RealRun run = run_real(s, steps, o, corpus);

  // bf16: the fp32 case of the same weights measures how far PyTorch's own bf16 run is from
  // exact (NOTE [Oracle tolerances]).
  std::optional<Reference> fp32;
  if (tol.bf16)
    fp32.emplace(kOracle /
                 (tol.fp32_case.empty() ? name.substr(0, name.size() - 5) : tol.fp32_case));

  // The logits of global sequence 0 of step 0 (rank 0's first), before any optimizer step.
  if (tp == 1) {
    const auto want = ref.f32("logits");
    const auto& got = run.ranks[0].logits;
    const size_t V = static_cast<size_t>(s.model.vocab_size);
    ASSERT_EQ(want.size(), static_cast<size_t>(S) * V);
    ASSERT_EQ(got.size(), static_cast<size_t>(s.training.batch_per_rank * S) * V);
    const std::vector<float> first(got.begin(),
                                   got.begin() + static_cast<std::ptrdiff_t>(want.size()));
    if (tol.bf16) {
      const double allowed =
          std::max(tol.floor, tol.factor * norm_relative(fp32->f32("logits"), want));
      EXPECT_LE(norm_relative(first, want), allowed) << "logits";
      std::printf("%s, %d ranks: logits norm-relative %.3g (allowed %.3g)\n", name.c_str(), world,
                  norm_relative(first, want), allowed);
    } else {
      size_t at = 0;
      const double v = elementwise_violation(first, want, 1e-5, 1e-5, &at);
      EXPECT_LE(v, 1.0) << "logits[" << at / V << ", " << at % V << "]: " << first[at]
                        << " vs torch " << want[at];
      std::printf("%s, %d ranks: logits violation %.3g\n", name.c_str(), world, v);
    }
  }
  const auto loss = ref.f32("loss");
  ASSERT_EQ(run.mean_loss.size(), loss.size());
  for (size_t k = 0; k < loss.size(); ++k) {
    double rtol = tol.loss_rtol;
    if (fp32)
      rtol = std::max(
          rtol, tol.factor * std::abs(static_cast<double>(loss[k]) / fp32->f32("loss")[k] - 1));
    EXPECT_NEAR(run.mean_loss[k], loss[k], rtol * std::abs(loss[k])) << "loss of step " << k;
  }

  const Reference init(fs::path(s.model_weights).parent_path(),
                       fs::path(s.model_weights).filename().c_str());
  double worst_grad = 0, worst_loss = 0;
  for (size_t k = 0; k < loss.size(); ++k)
    worst_loss = std::max(worst_loss, std::abs(run.mean_loss[k] / loss[k] - 1));
  for (const auto& [fqn, grad] : run.grads) {
    const auto g = hf_layout(s, fqn, grad);
    const int64_t d0 = dim0_of(s, fqn);
    const auto want = reference_of(ref, "grad/", s, fqn, d0);
    ASSERT_EQ(g.size(), want.size()) << fqn;
    if (tol.bf16) {
      const double allowed =
          std::max(tol.floor, tol.factor * norm_relative(reference_of(*fp32, "grad/", s, fqn, d0),
                                                         want));
      EXPECT_LE(norm_relative(g, want), allowed) << "gradient of " << fqn;
      worst_grad = std::max(worst_grad, norm_relative(g, want) / allowed);
      continue;
    }
    size_t at = 0;
    const double v = elementwise_violation(g, want, 1e-5, 1e-5, &at);
    EXPECT_LE(v, 1.0) << "gradient of " << fqn << "[" << at << "]: " << g[at] << " vs torch "
                      << want[at];
    worst_grad = std::max(worst_grad, v);
    if (std::getenv("ORACLE_VERBOSE")) std::printf("  %s %.3g\n", fqn.c_str(), v);
  }
  std::printf("%s, %d ranks: worst loss rel %.3g, gradient %s %.3g\n", name.c_str(), world,
              worst_loss, tol.bf16 ? "norm-relative / allowed" : "violation", worst_grad);
  if (!ref.has("param/" + std::string(s.model.arch == ModelArch::kLlama
                                          ? "model.norm.weight"
                                          : "transformer.ln_f.weight")))
    return;  // the variants store gradients only
  double worst_update = 0;
  for (const auto& [fqn, param] : run.params) {
    const auto p = hf_layout(s, fqn, param);
    const int64_t d0 = dim0_of(s, fqn);
    const auto want = reference_of(ref, "param/", s, fqn, d0);
    // The update relative to the initial weights (NOTE [Oracle tolerances]).
    const auto p0 = reference_of(init, "", s, fqn, d0);
    ASSERT_EQ(p.size(), want.size()) << fqn;
    std::vector<float> du(p.size()), dw(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      du[i] = p[i] - p0[i];
      dw[i] = want[i] - p0[i];
    }
    // GPT-2's key bias (c_attn.bias[D, 2D)) has a zero gradient in exact arithmetic (it adds
    // q . b_k to every score of a query row, which softmax ignores): its AdamW update is
    // rounding noise normalised to a full step on both sides, and is left out.
    if (fqn.size() > 11 && fqn.compare(fqn.size() - 11, 11, "c_attn.bias") == 0)
      for (int64_t i = s.model.dim; i < 2 * s.model.dim; ++i)
        du[static_cast<size_t>(i)] = dw[static_cast<size_t>(i)] = 0;
    const double rel = norm_relative(du, dw);
    worst_update = std::max(worst_update, rel);
    EXPECT_LE(rel, 2e-4) << "update of " << fqn << " after " << steps
                         << " steps differs from torch's by " << rel << " of its norm";
  }
  std::printf("%s, %d ranks: worst update norm-relative %.3g\n", name.c_str(), world, worst_update);
  // DeepSeek-V3's expert bias after the last step (torchtitan's update, added to the PyTorch
  // run by tools/oracle/moe_oracle.py): the same counts give the same signs, so within fp32.
  int buffers = 0;
  for (const auto& [fqn, v] : run.ranks[0].buffers) {
    const auto hf = hf_tensor_name(hf_arch(s.model), fqn);
    if (!hf || !ref.has("buffer/" + hf->name)) continue;
    const auto want = ref.f32("buffer/" + hf->name);
    ASSERT_EQ(v.size(), want.size()) << fqn;
    for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], want[i], 1e-6) << fqn << "[" << i << "]";
    ++buffers;
  }
  if (ref.meta("expert_bias_coeff") != "") EXPECT_GT(buffers, 0) << "no expert bias compared";
}

class CpuOracle : public ::testing::TestWithParam<int> {};

TEST_P(CpuOracle, LlamaFp32) { check_case("llama", GetParam(), {}); }
TEST_P(CpuOracle, Gpt2Fp32) { check_case("gpt2", GetParam(), {}); }
TEST_P(CpuOracle, LlamaRopeScalingFp32) { check_case("llama-rope-scaling", GetParam(), {}); }
TEST_P(CpuOracle, LlamaBf16) { check_case("llama-bf16", GetParam(), {true, 2e-3}); }
TEST_P(CpuOracle, Gpt2Bf16) { check_case("gpt2-bf16", GetParam(), {true, 2e-3}); }
// NOTE [Float8 oracle tolerance]: torchao's tensorwise float8 (emulated, tools/oracle/
// float8_llama.py) against the CPU backend's emulation of it, on one rank: tensorwise scales take
// the amax of each rank's own activations, so a batch split over ranks casts differently and the
// one-process reference holds for one rank only. Both cast alike to the bit
// (kernels_float8_test); the fp32 matmuls sum in another order, and an element next to a float8
// rounding boundary may round the other way. So fullshard must be within 1/10 of float8's own
// distance from the fp32 run (the llama case) per gradient tensor, the logits and each loss,
// floor 1e-3: far closer than float8 is to fp32, so it reproduces torchao's float8, not fp32
// (measured: logits 2e-7 apart, the losses equal, every gradient within 1e-6).
TEST(CpuOracle, LlamaFloat8OneRank) {
  check_case("llama-float8", 1, {true, 1e-5, 1e-3, 0.1, "llama"});
}

// Mixture-of-experts (tools/oracle/moe_oracle.py): Hugging Face's Mixtral, Qwen3-MoE and
// DeepSeek-V3 (latent attention, a dense first layer, shared experts, sigmoid scores with
// group-limited routing and the expert bias that torchtitan's pre-step hook moves) against the
// CPU backend's torchtitan-style MoE, the hub's per-expert tensors loaded into its grouped ones.
TEST_P(CpuOracle, MixtralFp32) { check_case("mixtral", GetParam(), {}); }
TEST_P(CpuOracle, Qwen3MoeFp32) { check_case("qwen3-moe", GetParam(), {}); }
TEST_P(CpuOracle, DeepseekV3Fp32) { check_case("deepseek-v3", GetParam(), {}); }
// Hugging Face's auxiliary load-balancing loss (output_router_logits, NOTE [Auxiliary
// load-balancing loss] in core/model/moe_aux_loss.h): over one process's tokens, so one rank
// reproduces PyTorch's run; on more ranks each has its own, as under DDP / FSDP.
// Activation checkpointing recomputes the routers, which route again: the backward reads the
// counts as the loss saw them.
TEST(CpuOracle, MixtralAuxLossOneRank) {
  check_case("mixtral-aux", 1, {});
  for (const char* ac : {"full", "selective_op"}) {
    SCOPED_TRACE(ac);
    check_case("mixtral-aux", 1, {}, [ac](json& j) { j["training"]["activation_checkpointing"] = ac; });
  }
}

// Expert parallelism: the experts split over ep ranks (all-to-all dispatch and combine), each
// rank's experts FSDP-sharded on dim 0. (Shard(1) needs efsdp above the local experts and
// dividing dim 32: 8+ ranks, which the batch of 12 does not split over; the property
// RealMoeTraining.ExpertParallelEqualsUnsharded draws it against one rank.)
TEST(CpuOracle, MoeExpertParallel) {
  const auto ep = [](int degree) {
    return [degree](json& j) { j["expert_parallel"] = {{"degree", degree}}; };
  };
  check_case("mixtral", 4, {}, ep(2));
  check_case("mixtral", 4, {}, ep(4));
  check_case("qwen3-moe", 2, {}, ep(2));
  check_case("deepseek-v3", 4, {}, ep(4));
}

// NOTE [Rotary pairing of weight files] (core/checkpoint/hf_names.h): Hugging Face weights load
// into the other RoPE pairing with their rotary rows permuted, and train the same model: a
// Llama (q / k weights; also split over tp) and Qwen3-MoE (and their q / k norms) under
// torchtitan's complex RoPE, DeepSeek-V3 (MLA's rope rows) under the fused kernel's halves.
TEST(CpuOracle, WeightsLoadIntoTheOtherRopePairing) {
  const auto rope = [](const char* r) {
    return [r](json& j) { j["model"]["implementation"] = {{"rope", r}}; };
  };
  check_case("llama", 2, {}, rope("complex"));
  check_case("llama", 4, {}, rope("complex"), 2);
  check_case("qwen3-moe", 1, {}, rope("complex"));
  check_case("deepseek-v3", 2, {}, rope("fused"));
}

INSTANTIATE_TEST_SUITE_P(Ranks, CpuOracle, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// Variants that must not change what is computed: Hugging Face's implementation (eager
// RMSNorm, rotate_half RoPE with cos / sin tables, logits kept), fused AdamW, activation
// checkpointing, gradient accumulation over 2 micro-batches (the loss scaled by 1/2, so 2
// micro-batches of 6 give the gradient of one batch of 12), and one FSDP unit for the model.
TEST(CpuOracle, LlamaVariantsOn2Ranks) {
  const std::pair<const char*, Edit> variants[] = {
      {"hf-transformers", [](json& j) { j["model"]["implementation"] = "hf-transformers"; }},
      {"fused AdamW", [](json& j) { j["training"]["optimizer"]["implementation"] = "fused"; }},
      {"full AC", [](json& j) { j["training"]["activation_checkpointing"] = "full"; }},
      {"grad accumulation", [](json& j) { j["training"]["grad_accum_steps"] = 2; }},
      {"root unit", [](json& j) { j["fsdp"]["units"] = "root"; }},
  };
  for (const auto& [what, edit] : variants) {
    SCOPED_TRACE(what);
    check_case("llama", 2, {}, edit);
  }
}
// Llama 3.1's scaled frequencies through the cos / sin tables of rope=rotate_half (kRotaryCosSin).
TEST(CpuOracle, LlamaRopeScalingHfImplementationOn2Ranks) {
  check_case("llama-rope-scaling", 2, {},
             [](json& j) { j["model"]["implementation"] = "hf-transformers"; });
}
TEST(CpuOracle, Gpt2VariantsOn3Ranks) {
  check_case("gpt2", 3, {}, [](json& j) { j["training"]["activation_checkpointing"] = "full"; });
  check_case("gpt2", 3, {},
             [](json& j) { j["training"]["optimizer"]["implementation"] = "fused"; });
}

// Tensor parallelism (tp 2, with FSDP over 2): the plans of core/model/tensor_parallel.cc
// against PyTorch's unsharded run, GPT-2's fused c_attn loaded from the HF weights per q / k / v.
TEST(CpuOracle, TensorParallel2) {
  check_case("gpt2", 4, {}, {}, 2);
  check_case("llama", 4, {}, {}, 2);
}

// The rope-scaling case is only a test of the scaling if plain RoPE fails it: the two
// references' q / k gradients must differ by more than the fp32 tolerance.
TEST(CpuOracle, RopeScalingChangesTheGradients) {
  const Reference plain(kOracle / "llama"), scaled(kOracle / "llama-rope-scaling");
  size_t at = 0;
  EXPECT_GT(elementwise_violation(plain.f32("grad/model.layers.1.self_attn.q_proj.weight"),
                                  scaled.f32("grad/model.layers.1.self_attn.q_proj.weight"), 1e-5,
                                  1e-5, &at),
            10.0);
}

// Weights of another model are refused naming the scenario field they came from.
TEST(CpuOracle, WrongWeightsNameModelWeights) {
  const Scenario s = case_scenario(
      kOracle / "llama", 1, [](json& j) { j["model"]["weights"] = "../gpt2/model.safetensors"; });
  try {
    runner::validate_init_weights(s.model_weights, s, "model.weights");
    ADD_FAILURE() << "GPT-2 weights accepted for a Llama scenario";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "model.weights") << e.what();
    EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight"), std::string::npos)
        << e.what();
  }
}

// Reading the logits out (a forward before the first step) changes nothing of the training:
// the same losses and parameters, bit for bit, as without it.
TEST(CpuOracle, LogitsReadoutChangesNothing) {
  const Scenario s = case_scenario(kOracle / "llama", 2, {});
  auto corpus =
      std::make_shared<const TextCorpus>(TextCorpus::from_file((kOracle / "corpus.txt").string()));
  runner::RankOptions with;
  with.collect_logits = true;
  const RealRun a = run_real(s, 2, {}, corpus), b = run_real(s, 2, with, corpus);
  EXPECT_TRUE(a.ranks[0].logits.empty());
  EXPECT_FALSE(b.ranks[0].logits.empty());
  EXPECT_EQ(a.mean_loss, b.mean_loss);
  EXPECT_EQ(a.params, b.params);
}

// The references record what produced them.
TEST(CpuOracle, ReferencesNameTheirVersions) {
  for (const char* c : {"llama", "gpt2", "llama-rope-scaling", "llama-bf16", "gpt2-bf16",
                        "llama-float8", "mixtral", "mixtral-aux", "qwen3-moe", "deepseek-v3"}) {
    const Reference r(kOracle / c);
    EXPECT_FALSE(r.meta("torch").empty()) << c;
    EXPECT_FALSE(r.meta("transformers").empty()) << c;
    EXPECT_TRUE(r.has("logits")) << c;
  }
}

}  // namespace
}  // namespace fullshard
