// Real training on the CPU backend (ranks as threads over an in-process Gloo store):
// sharded training equals unsharded training, and the simulator's memory prediction equals
// what the real backend measured, to the byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <rapidcheck/gtest.h>
#include <string>

#include "tests/support/cpu_support.h"
#include "tests/support/prop_support.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using namespace fullshard::testing;
using nlohmann::json;

namespace {

json small_model() {
  const bool llama = *rc::gen::arbitrary<bool>();
  const int heads = *rc::gen::element(1, 2, 4);
  const int head_dim = *rc::gen::element(2, 4);
  json m = {{"arch", llama ? "llama" : "gpt2"},
            {"name", "random"},
            {"vocab_size", 256},
            {"dim", heads * head_dim},
            {"n_layers", *rc::gen::inRange(1, 3)},
            {"n_heads", heads},
            {"ffn_dim", *rc::gen::inRange(3, 17)},
            {"max_seq_len", 16}};
  if (llama) m["n_kv_heads"] = heads / *rc::gen::element(1, heads);
  return m;
}

// The same job on one rank: the whole global batch, no sharding.
json unsharded(json j) {
  int world = 1;
  for (int d : j["fsdp"]["mesh"]["shape"]) world *= d;
  return unsharded_job(std::move(j), world);
}

// fsdp.per_unit: maybe one unit (the root or a block, counted from either end) with its own
// reshard_after_forward from `raf`.
void maybe_per_unit(json& j, const std::vector<json>& raf) {
  if (j["fsdp"]["units"] == "root" || !*rc::gen::arbitrary<bool>()) return;
  const int layers = j["model"]["n_layers"];
  const bool edges = j["fsdp"]["units"] == "embed_blocks_head";
  const int u =
      *rc::gen::inRange(edges ? -3 : -1, layers);  // -1: the root, -2 / -3: the edge units
  const std::string key = u == -1   ? "root"
                          : u == -2 ? "tok_embeddings"
                          : u == -3 ? *rc::gen::element(std::string("norm"), std::string("output"))
                                    : "layers." + std::to_string(*rc::gen::element(u, u - layers));
  j["fsdp"]["per_unit"] = {{key, {{"reshard_after_forward", *rc::gen::elementOf(raf)}}}};
  RC_TAG("per_unit");
}

// fsdp.per_unit.<block>.forward_prefetch / backward_prefetch, maybe: one block names other
// blocks (any order, the root too) to prefetch, as a script's set_modules_to_*_prefetch does.
// It goes on the key per_unit already uses for that block, if any ("layers.-1" and "layers.N-1"
// name one unit).
void maybe_named_prefetch(json& j) {
  if (j["fsdp"]["units"] == "root" || !*rc::gen::arbitrary<bool>()) return;
  const int layers = j["model"]["n_layers"];
  if (layers < 2) return;
  const int u = *rc::gen::inRange(0, layers);
  std::vector<std::string> others;
  for (int i = 0; i < layers; ++i)
    if (i != u) others.push_back("layers." + std::to_string(i));
  others.push_back("root");
  const auto picked = *rc::gen::unique<std::vector<std::string>>(rc::gen::elementOf(others));
  if (!j["fsdp"].contains("per_unit") || !j["fsdp"]["per_unit"].is_object())
    j["fsdp"]["per_unit"] = json::object();
  json& per_unit = j["fsdp"]["per_unit"];
  std::string key = "layers." + std::to_string(u);
  for (auto& [name, v] : per_unit.items())
    if (name.rfind("layers.", 0) == 0 && (std::stoi(name.substr(7)) + layers) % layers == u)
      key = name;
  const std::string which =
      *rc::gen::element(std::string("forward_prefetch"), std::string("backward_prefetch"));
  per_unit[key][which] = picked;
  RC_TAG("named " + which);
}

// torchtitan's program for a Llama model, maybe: tied embeddings, fsdp.units
// "embed_blocks_head" (the embedding and fully_shard([norm, output]) as units, or, tied,
// fully_shard([tok_embeddings, norm, output])) and the chunked loss with a chunk count dividing
// each rank's batch x seq tokens. Returns the chunk count (0: the loss is left as it is).
int maybe_torchtitan_units_and_loss(json& j) {
  if (j["model"]["arch"] != "llama") return 0;
  if (*rc::gen::inRange(0, 3) == 0) {
    j["model"]["tie_embeddings"] = true;
    RC_TAG("tied");
  }
  if (*rc::gen::inRange(0, 3) == 0) {
    j["fsdp"]["units"] = "embed_blocks_head";
    RC_TAG("embed_blocks_head");
  }
  if (!*rc::gen::arbitrary<bool>()) return 0;
  const int n = draw_loss_chunks(j);
  j["model"]["implementation"] = {{"loss", "chunked"}, {"loss_chunks", n}};
  RC_TAG("chunked loss");
  return n;
}

// model.implementation.compile, maybe (Llama only): the compiled block's fused regions
// (core/model/compiled_block.h) in place of the eager ops.
void maybe_compile(json& j) {
  if (j["model"]["arch"] != "llama" || *rc::gen::inRange(0, 3) != 0) return;
  if (!j["model"].contains("implementation")) j["model"]["implementation"] = json::object();
  j["model"]["implementation"]["compile"] = true;
  RC_TAG("compile");
}

// The dtype the run computes in: fsdp.mixed_precision.param_dtype, else training.orig_dtype.
std::string run_dtype(const json& j) {
  const json& mp = j["fsdp"]["mixed_precision"];
  if (mp.is_object() && mp.contains("param_dtype") && mp["param_dtype"].is_string())
    return mp["param_dtype"].get<std::string>();
  return j["training"].value("orig_dtype", std::string("fp32"));
}

// Original parameters in bf16, maybe (training.orig_dtype, NOTE [Original dtype] in
// core/fsdp/fsdp_param_group.cc), under any policy FSDP2 accepts: none (bf16 compute, bf16
// reduce-scatter), param_dtype bf16 (clamped away: no cast), reduce_dtype fp32 (a widening
// reduce-scatter, cast back) or param_dtype fp32 (an upcasting all-gather). Not with compile,
// which refuses them.
void maybe_bf16_originals(json& j) {
  if (*rc::gen::inRange(0, 3) != 0) return;
  if (j["model"].contains("implementation") && j["model"]["implementation"].value("compile", false))
    return;
  j["training"]["orig_dtype"] = "bf16";
  j["fsdp"]["mixed_precision"] =
      *rc::gen::element(json::object(), json{{"param_dtype", "bf16"}},
                        json{{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}},
                        json{{"reduce_dtype", "fp32"}}, json{{"param_dtype", "fp32"}});
  RC_TAG("bf16 originals");
}

// fsdp.per_unit.<unit>.mixed_precision, maybe: one block (or, with embed_blocks_head, the
// [norm, output] or tied [tok_embeddings, norm, output] unit) computing in fp32 inside a bf16 /
// fp32 run. It casts its input (cast_forward_inputs) and casts its output back to the run's param
// dtype, so the next unit gets what it computes in (NOTE [Dtype flow between units]).
void maybe_per_unit_mixed_precision(json& j) {
  if (!*rc::gen::arbitrary<bool>()) return;
  const std::string run = run_dtype(j);
  const bool edges = j["fsdp"]["units"] == "embed_blocks_head";
  if (j["fsdp"]["units"] == "root") return;
  const int layers = j["model"]["n_layers"];
  const int u = *rc::gen::inRange(edges ? -1 : 0, layers);
  const std::string key = u < 0 ? "output" : "layers." + std::to_string(u);
  // A tied [tok_embeddings, norm, output] unit feeds block 0 too: it casts its outputs back.
  const bool tied = j["model"].value("tie_embeddings", false);
  json o = {{"param_dtype", run == "fp32" ? "bf16" : "fp32"}};
  if (key != "output" || tied) o["output_dtype"] = run;
  if (!j["fsdp"].contains("per_unit") || !j["fsdp"]["per_unit"].is_object())
    j["fsdp"]["per_unit"] = json::object();
  json& per_unit = j["fsdp"]["per_unit"];
  // Keys naming the same unit ("norm" / "output", tied "tok_embeddings" / "output",
  // "layers.-1" / "layers.N-1"): keep one.
  std::string k = per_unit.contains("norm") && key == "output" ? "norm" : key;
  if (tied && per_unit.contains("tok_embeddings") && key == "output") k = "tok_embeddings";
  for (auto& [name, v] : per_unit.items())
    if (name.rfind("layers.", 0) == 0 && key != "output" &&
        (std::stoi(name.substr(7)) + layers) % layers == u)
      k = name;
  per_unit[k]["mixed_precision"] = o;
  RC_TAG("per-unit mixed precision");
}

// Frozen parameters or LoRA, maybe (NOTE [Frozen parameters] in core/model/lora.cc): LoRA
// adapters of rank 1 or 2 on a random set of a Llama's linears (the base frozen), or
// training.frozen patterns over either architecture, the frozen dtype the run's param dtype (or
// the original dtype). Not with compile, which refuses them.
void maybe_frozen(json& j) {
  if (*rc::gen::inRange(0, 3) != 0) return;
  if (j["model"].contains("implementation") && j["model"]["implementation"].value("compile", false))
    return;
  // A frozen dtype other than the original one must be every unit's param_dtype.
  const std::string orig = j["training"].value("orig_dtype", std::string("fp32"));
  std::string dt = run_dtype(j);
  if (j["fsdp"].contains("per_unit") &&
      j["fsdp"]["per_unit"].dump().find("mixed_precision") != std::string::npos)
    dt = orig;
  j["training"]["frozen_dtype"] = *rc::gen::element(dt, orig);
  bool llama = j["model"]["arch"] == "llama";
  // small_model's arbitrary<bool> leans to GPT-2 at small sizes: half of those become the same
  // sizes as a Llama (nothing drawn so far depends on GPT-2), so LoRA is drawn often enough.
  if (!llama && *rc::gen::inRange(0, 2) == 0) {
    j["model"]["arch"] = "llama";
    j["model"]["n_kv_heads"] = j["model"]["n_heads"];
    llama = true;
  }
  if (llama && *rc::gen::inRange(0, 4) != 0) {
    const int dim = j["model"]["dim"],
              kv = j["model"].value("n_kv_heads", 1) * (dim / j["model"]["n_heads"].get<int>());
    const std::vector<std::string> all = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                          "gate_proj", "up_proj", "down_proj"};
    auto targets =
        *rc::gen::nonEmpty(rc::gen::unique<std::vector<std::string>>(rc::gen::elementOf(all)));
    j["model"]["lora"] = {{"rank", std::min(*rc::gen::inRange(1, 3), std::min(dim, kv))},
                          {"alpha", *rc::gen::element(1.0, 4.0)},
                          {"target_modules", targets}};
    RC_TAG("lora");
    return;
  }
  const std::vector<std::string> patterns =
      llama ? std::vector<std::string>{"tok_embeddings.weight", "layers.0.*", "*norm.weight",
                                       "layers.*.attention.w?.weight", "output.weight"}
            : std::vector<std::string>{"wte.weight", "wpe.weight", "layers.0.*", "*.ln_?.*",
                                       "layers.*.mlp.c_fc.*"};
  auto picked =
      *rc::gen::nonEmpty(rc::gen::unique<std::vector<std::string>>(rc::gen::elementOf(patterns)));
  // A tied Llama has no output weight of its own.
  if (j["model"].value("tie_embeddings", false))
    picked.erase(std::remove(picked.begin(), picked.end(), "output.weight"), picked.end());
  if (picked.empty()) picked.push_back(llama ? "tok_embeddings.weight" : "wte.weight");
  // Patterns that together freeze a one-block model whole are refused: drop the last until
  // something trains (one pattern never freezes everything).
  for (j["training"]["frozen"] = picked; picked.size() > 1; j["training"]["frozen"] = picked) {
    try {
      parse_scenario(j);
      break;
    } catch (const InputError&) {
      picked.pop_back();
    }
  }
  RC_TAG("frozen");
}

// fsdp.ignored_params, maybe (NOTE [Ignored parameters] in core/fsdp/ignored_param.h): some of
// the frozen parameters (maybe_frozen's patterns, or a LoRA base's embedding, head or norms)
// left whole on every rank instead of sharded; without frozen parameters, maybe one pattern both
// frozen (in the run's compute dtype) and ignored, whose unit may then have no parameter group
// ("layers.0.*"). Patterns the scenario refuses (an ignored parameter in a dtype its unit does
// not compute in) are dropped until it parses. The choices come from a hash of the case drawn
// so far, not from rapidcheck: more draws would change every later case of CI's fixed seed, and
// one of the cases that then appeared (GPT-2, bf16 originals over 3 ranks, no ignored parameter)
// failed the tolerance NOTE [bf16 originals tolerance] had before its movement term.
void maybe_ignored(json& j) {
  uint64_t h = std::hash<std::string>{}(j.dump());
  auto pick = [&h](size_t n) {  // splitmix64
    h += 0x9e3779b97f4a7c15ULL;
    uint64_t z = h;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return static_cast<size_t>((z ^ (z >> 31)) % n);
  };
  std::vector<std::string> candidates;
  const bool llama = j["model"]["arch"] == "llama";
  const bool tied = j["model"].value("tie_embeddings", false);
  const bool compile =
      j["model"].contains("implementation") && j["model"]["implementation"].value("compile", false);
  bool froze_here = false;
  if (j["model"].contains("lora")) {
    candidates = {"tok_embeddings.weight", "*norm.weight", "layers.0.attention.wq.weight"};
    if (!tied) candidates.push_back("output.weight");
  } else if (j["training"].contains("frozen")) {
    for (const auto& p : j["training"]["frozen"]) candidates.push_back(p.get<std::string>());
  } else if (!compile && pick(3) == 0) {
    const std::vector<std::string> one =
        llama ? std::vector<std::string>{"tok_embeddings.weight",
                                         tied ? "norm.weight" : "output.weight", "*norm.weight",
                                         "layers.0.*"}
              : std::vector<std::string>{"wte.weight", "wpe.weight", "*.ln_?.*", "layers.0.*"};
    candidates = {one[pick(one.size())]};
    j["training"]["frozen"] = candidates;
    j["training"]["frozen_dtype"] = run_dtype(j);
    froze_here = true;
  }
  if (candidates.empty() || (!froze_here && pick(4) == 0)) return;
  std::vector<std::string> picked;
  for (const std::string& c : candidates)
    if (pick(2) == 0) picked.push_back(c);
  if (picked.empty()) picked.push_back(candidates[pick(candidates.size())]);
  for (; !picked.empty(); picked.pop_back()) {
    j["fsdp"]["ignored_params"] = picked;
    try {
      parse_scenario(j);
      RC_TAG("ignored params");
      return;
    } catch (const InputError&) {}
  }
  j["fsdp"].erase("ignored_params");
  if (froze_here) {
    j["training"].erase("frozen");
    j["training"].erase("frozen_dtype");
  }
}

// QLoRA's NF4 base, maybe (training.frozen_dtype "nf4", docs/qlora.md): a LoRA draw computing
// in bf16 gets its block linears in NF4, with blocks of 2 elements and one scaler per factor so
// that the small models' weights split (block_size x scaler_block_size must divide each weight,
// its rows and factors the shard group), on the meta init and without offload, which NF4
// needs. Draws NF4 still refuses (HSDP, an int reshard, ignored parameters, op-level SAC, rows
// that do not split) keep the bf16 base. It draws nothing from rapidcheck, so CI's other cases
// are unchanged.
void maybe_nf4(json& j) {
  if (!j["model"].contains("lora") || run_dtype(j) != "bf16") return;
  json q = j;
  q["training"]["frozen_dtype"] = "nf4";
  q["training"]["nf4"] = {{"block_size", 2}, {"scaler_block_size", 1}};
  q["training"].erase("init");
  q["fsdp"]["cpu_offload"] = false;
  try {
    parse_scenario(q);
  } catch (const InputError&) {
    return;
  }
  j = std::move(q);
  RC_TAG("nf4");
}

// fsdp.post_optim_event, maybe (NOTE [Post-optimizer event] in core/fsdp/fully_shard.cc): chosen
// from a hash of the case drawn so far, as maybe_ignored's choices are, and after them, so every
// other choice of CI's fixed seed stays what it was.
void maybe_post_optim_event(json& j) {
  if (std::hash<std::string>{}(j.dump() + " post_optim_event") % 3 != 0) return;
  j["fsdp"]["post_optim_event"] = true;
  RC_TAG("post_optim_event");
}

// fsdp.unshard_async_op, maybe (NOTE [Hooks' async unshard] in core/fsdp/fsdp_param_group.cc):
// from a hash of the case drawn so far, after every other choice, so CI's fixed seed keeps them.
void maybe_unshard_async_op(json& j) {
  if (std::hash<std::string>{}(j.dump() + " unshard_async_op") % 3 != 0) return;
  j["fsdp"]["unshard_async_op"] = true;
  RC_TAG("unshard_async_op");
}

// fsdp.unshard, maybe (NOTE [Async unshard] in core/fsdp/fsdp_param_group.cc): units and async_op
// from a hash of the case drawn so far, after every other choice, so CI's fixed seed keeps them.
// A choice the scenario refuses (a block with fsdp.units "root", a pp dim) is dropped.
void maybe_unshard(json& j) {
  const size_t h = std::hash<std::string>{}(j.dump() + " unshard");
  if (h % 3 != 0) return;
  static const std::vector<std::vector<std::string>> choices = {
      {"root"}, {"layers.0", "root"}, {"layers.-1"}};
  json q = j;
  q["fsdp"]["unshard"] = {{"modules", choices[(h / 3) % choices.size()]},
                          {"async_op", (h / 9) % 2 == 0}};
  try {
    parse_scenario(q);
  } catch (const InputError&) {
    return;
  }
  j = std::move(q);
  RC_TAG(j["fsdp"]["unshard"]["async_op"].get<bool>() ? "unshard async_op" : "unshard");
}

// training.generate_every 1 with fsdp.forward_methods ["generate"], maybe (NOTE [Forward
// methods] in core/fsdp/fully_shard.cc): a model.generate() pass after every step.
void maybe_generate(json& j) {
  if (std::hash<std::string>{}(j.dump() + " generate") % 3 != 0) return;
  json q = j;
  q["training"]["generate_every"] = 1;
  q["fsdp"]["forward_methods"] = {"generate"};
  try {
    parse_scenario(q);
  } catch (const InputError&) {
    return;
  }
  j = std::move(q);
  RC_TAG("generate");
}

}  // namespace

// NOTE [fp32 tolerance]: sharded and unsharded fp32 runs differ only in summation order (a
// reduce-scatter of W partial gradients vs one matmul over the whole batch): ~1e-7 relative
// per reduction. Adam divides by sqrt(v), which turns a tiny gradient's noise into a full
// lr-sized step, so the tests use eps = 1e-6 (not 1e-8) and compare with
// |a - b| <= 1e-5 + 1e-3 |b| after 2 steps at lr 1e-3.
// training.init (NOTE [Initialisation modes] in core/train/model_init.cc): every mode leaves the
// same values in the shards; "device" and "broadcast_from_rank0" are refused with CPU offload.
static void maybe_init_mode(json& j, bool cpu_offload) {
  if (cpu_offload) return;
  const std::string mode = *rc::gen::element(std::string("meta"), std::string("device"),
                                             std::string("broadcast_from_rank0"));
  j["training"]["init"] = mode;
  RC_TAG("init " + mode);
}

RC_GTEST_PROP(RealTraining, ShardedEqualsUnsharded, ()) {
  TinyOptions o;
  if (*rc::gen::inRange(0, 3) == 0) {
    o.mesh = {2, *rc::gen::inRange(1, 3)};  // HSDP
  } else {
    o.mesh = {*rc::gen::inRange(1, 5)};
  }
  const int shard = o.mesh.back();
  std::vector<json> raf = {nullptr, true, false};
  for (int n = 2; n < shard; ++n)
    if (shard % n == 0) raf.push_back(n);
  o.reshard_after_forward = *rc::gen::elementOf(raf);
  o.cpu_offload = *rc::gen::arbitrary<bool>();
  o.units = *rc::gen::element(std::string("blocks"), std::string("root"));
  o.max_grad_norm = *rc::gen::element(0.0, 1.0);
  o.steps = 2;
  o.batch = *rc::gen::inRange(1, 3);
  o.seq = *rc::gen::inRange(2, 9);
  o.hardware_extra = {{"allocator", {{"expandable_segments", *rc::gen::arbitrary<bool>()}}}};
  json j = tiny_scenario_json(o);
  j["model"] = small_model();
  j["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}, {"max_grad_norm", o.max_grad_norm}};
  maybe_torchtitan_units_and_loss(j);
  maybe_compile(j);
  maybe_per_unit(j, raf);
  maybe_named_prefetch(j);
  keep_root_unsharded_for_chunks(j);
  if (o.cpu_offload && *rc::gen::arbitrary<bool>())  // NOTE [Pageable offload]: blocking D2H
    j["fsdp"]["cpu_offload"] = {{"pin_memory", false}};
  j["training"]["seed"] = *rc::gen::inRange(0, 1000);
  maybe_init_mode(j, o.cpu_offload);
  maybe_bf16_originals(j);
  maybe_frozen(j);
  maybe_ignored(j);
  maybe_nf4(j);
  maybe_post_optim_event(j);
  maybe_unshard(j);
  maybe_unshard_async_op(j);
  RC_TAG(o.mesh.size() == 2 ? "hsdp" : "fsdp");
  if (o.mesh.back() == 1) RC_TAG("world-size-1 shortcut");
  // NOTE [bf16 originals tolerance]: with parameters stored in bf16 the gradients are bf16 too:
  // each rank rounds its partial gradient before the reduction, where the unsharded run rounds the
  // sum once, so a gradient element that is a near-cancelling sum of partials differs by up to 2^-8
  // of its partials, not of itself. With eps 1e-6 Adam's first steps are lr x sign(g), so such
  // noise moves a parameter by a whole lr either way: the bf16 draws use eps 0.1 and lr 1e-2, where
  // a step moves a parameter by at most about lr x g / eps and its noise by lr x 2^-8 x |partial| /
  // eps. A tensor's partials have one scale (one activation scale feeds them), so that noise is a
  // small fraction of the tensor's largest movement, while a lost, doubled or misplaced shard
  // gradient moves elements by their whole update. Parameters are compared to 2e-4, plus two bf16
  // ulps (2^-7 relative: the update is rounded to bf16, so a parameter may land on the
  // neighbouring value), plus 10% of their tensor's largest movement; losses to 2e-3. 100 cases
  // pass on seeds 1 to 4 and CI's.
  if (j["training"].value("orig_dtype", std::string("fp32")) == "bf16") {
    j["training"]["optimizer"]["lr"] = 1e-2;
    j["training"]["optimizer"]["eps"] = 0.1;
    sharded_equals_unsharded(j, unsharded(j), {2e-4, 1.0 / 128, 2e-3, 0.1});
  } else {
    sharded_equals_unsharded(j, unsharded(j));
  }
}

// The simulator and the real backend run the same host program through the same allocator:
// peak allocated and reserved bytes are equal to the byte, on every rank.
RC_GTEST_PROP(RealTraining, PredictedPeakMemoryEqualsMeasured, ()) {
  TinyOptions o;
  o.mesh = *rc::gen::element(std::vector<int>{1}, std::vector<int>{2}, std::vector<int>{3},
                             std::vector<int>{2, 2});
  const int shard = o.mesh.back();
  std::vector<json> raf = {nullptr, true, false};
  if (shard == 4) raf.push_back(2);
  o.reshard_after_forward = *rc::gen::elementOf(raf);
  o.mixed_precision =
      *rc::gen::element(json::object(), json{{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}},
                        json{{"param_dtype", "bf16"}});
  o.cpu_offload = *rc::gen::arbitrary<bool>();
  o.activation_checkpointing = *rc::gen::element(json("none"), json("full"), json("selective_op"));
  o.grad_accum_steps = *rc::gen::inRange(1, 3);
  o.steps = 2;
  o.batch = *rc::gen::inRange(1, 3);
  o.seq = *rc::gen::inRange(2, 12);
  const bool expandable = *rc::gen::arbitrary<bool>();
  // cuBLAS workspaces (NOTE [cuBLAS workspaces]): none, a small-pool one of an odd size, or a
  // large-pool one; the real backend allocates them through the same Backend::launch.
  const uint64_t blas =
      *rc::gen::element<uint64_t>(0, 1000, uint64_t{1} << 20, (uint64_t{5} << 19) + 7);
  o.hardware_extra = {{"allocator", {{"expandable_segments", expandable}}},
                      {"blas_workspace_bytes", blas}};
  RC_TAG(expandable ? "expandable segments" : "classic segments");
  json j = tiny_scenario_json(o);
  j["model"] = small_model();
  // model.implementation's built variants (docs/ops.md, "Implementation variants").
  if (maybe_torchtitan_units_and_loss(j) == 0)
    j["model"]["implementation"] = {
        {"loss", *rc::gen::element(std::string("fp32_logits"), std::string("bf16_logits"),
                                   std::string("fp32_output"))},
        {"keep_logits", *rc::gen::arbitrary<bool>()}};
  maybe_compile(j);
  maybe_bf16_originals(j);
  maybe_per_unit(j, raf);
  maybe_per_unit_mixed_precision(j);
  maybe_named_prefetch(j);
  // set_unshard_in_backward(False) on the embedding's own unit (untied embed_blocks_head).
  if (j["fsdp"]["units"] == "embed_blocks_head" && !j["model"].value("tie_embeddings", false) &&
      *rc::gen::arbitrary<bool>()) {
    j["fsdp"]["per_unit"]["tok_embeddings"]["unshard_in_backward"] = false;
    RC_TAG("no unshard in backward");
  }
  keep_root_unsharded_for_chunks(j);
  if (o.cpu_offload && *rc::gen::arbitrary<bool>()) {  // NOTE [Pageable offload]
    j["fsdp"]["cpu_offload"] = {{"pin_memory", false}};
    RC_TAG("pageable offload");
  }
  if (o.grad_accum_steps > 1) {  // what FSDP2 reduces before the last micro-batch
    std::vector<std::string> syncs = {"none", "all"};
    const bool chunked = j["model"].contains("implementation") &&
                         j["model"]["implementation"].value("loss", "") == "chunked";
    if (o.mesh.size() == 2 && !chunked) syncs.push_back("reduce_scatter");  // HSDP only
    const std::string sync = *rc::gen::elementOf(syncs);
    j["training"]["grad_sync_during_accumulation"] = sync;
    RC_TAG("accumulation sync " + sync);
    if (*rc::gen::arbitrary<bool>()) {  // set_reshard_after_backward(m == k - 1)
      j["training"]["reshard_after_backward_during_accumulation"] = false;
      RC_TAG("no reshard after backward");
    }
  }
  maybe_init_mode(j, o.cpu_offload);
  maybe_frozen(j);
  maybe_ignored(j);
  maybe_nf4(j);
  maybe_post_optim_event(j);
  maybe_unshard(j);
  maybe_generate(j);
  maybe_unshard_async_op(j);
  if (o.mesh.back() == 1) RC_TAG("world-size-1 shortcut");
  Scenario s = parse_scenario(j);
  predicted_peaks_equal_measured(s);
}

// HSDP gradient accumulation with set_requires_all_reduce(False) (NOTE [Partial reduce without
// all-reduce]): the partial sums live on the reduce-scatter stream's pool between micro-batches;
// predicted and measured peaks agree to the byte with and without mixed precision and offload.
TEST(RealTraining, PartialReducePredictedPeakEqualsMeasured) {
  for (bool bf16 : {false, true})
    for (bool offload : {false, true}) {
      TinyOptions o;
      o.mesh = {2, 2};
      o.grad_accum_steps = 3;
      o.steps = 2;
      o.batch = 1;
      o.seq = 8;
      o.cpu_offload = offload;
      if (bf16) o.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
      json j = tiny_scenario_json(o);
      j["training"]["grad_sync_during_accumulation"] = "reduce_scatter";
      const Scenario s = parse_scenario(j);
      sim::SimulateOptions so;
      so.all_ranks = true;
      const sim::SimulationReport pred = sim::simulate_scenario(s, so);
      ASSERT_TRUE(pred.ok()) << problems_text(pred);
      const RealRun real = run_real(s);
      for (const auto& c : pred.classes)
        for (int r : c.ranks) {
          EXPECT_EQ(real.ranks[r].report.peak_allocated_bytes, c.peak_allocated_bytes)
              << "bf16 " << bf16 << " offload " << offload << " rank " << r;
          EXPECT_EQ(real.ranks[r].report.peak_reserved_bytes, c.peak_reserved_bytes)
              << "bf16 " << bf16 << " offload " << offload << " rank " << r;
        }
    }
}

// Whatever FSDP2 reduces before the last micro-batch (training.grad_sync_during_accumulation),
// the step's gradients are those of one larger batch.
TEST(RealTraining, GradientAccumulationEqualsOneLargerBatch) {
  struct Case {
    std::vector<int> mesh;
    std::string sync;
  };
  for (const Case& c :
       {Case{{1}, "none"}, Case{{2}, "none"}, Case{{2}, "all"}, Case{{2, 2}, "none"},
        Case{{2, 2}, "reduce_scatter"}, Case{{2, 2}, "all"}}) {
    TinyOptions o;
    o.mesh = c.mesh;
    const std::string world = c.mesh.size() == 2 ? "hsdp 2x2" : std::to_string(c.mesh[0]);
    o.steps = 2;
    o.seq = 8;
    o.batch = 1;
    o.grad_accum_steps = 3;
    json a = tiny_scenario_json(o);
    a["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}};
    json b = a;
    a["training"]["grad_sync_during_accumulation"] = c.sync;
    b["training"]["batch_per_rank"] = 3;
    b["training"]["grad_accum_steps"] = 1;
    RealRun ra = run_real(parse_scenario(a)), rb = run_real(parse_scenario(b));
    std::string where;
    EXPECT_LE(max_violation(ra, rb, 1e-5, 1e-3, &where), 1.0)
        << "world " << world << ", sync " << c.sync << ": " << where;
    for (size_t k = 0; k < ra.mean_loss.size(); ++k)
      EXPECT_NEAR(ra.mean_loss[k], rb.mean_loss[k], 1e-4) << world << " " << c.sync;
  }
}

// torchtitan's loss over the step's global valid tokens (model.implementation.loss_normalization,
// NOTE [Global valid tokens]) with FSDP2's gradient division off: the reductions sum, and the
// gradient is the global batch's mean. With even batches that is the mean loss's gradient
// (FSDP2's average of the ranks' means), on FSDP and HSDP, with gradient accumulation.
TEST(RealTraining, GlobalValidTokensLossTrainsAsTheMeanLoss) {
  for (const std::vector<int>& mesh : {std::vector<int>{2}, std::vector<int>{2, 2}}) {
    for (int accum : {1, 2}) {
      TinyOptions o;
      o.mesh = mesh;
      o.steps = 2;
      o.seq = 8;
      o.grad_accum_steps = accum;
      json a = tiny_scenario_json(o);
      a["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}};
      json b = a;
      a["model"] = {{"name", "tiny-llama"},
                    {"implementation", {{"loss_normalization", "global_valid_tokens"}}}};
      runner::RankOptions ro;
      ro.collect_grads = true;
      RealRun ra = run_real(parse_scenario(a), -1, ro), rb = run_real(parse_scenario(b), -1, ro);
      const std::string what =
          "mesh " + std::to_string(mesh.size()) + "-D, accum " + std::to_string(accum);
      std::string where;
      EXPECT_LE(max_violation(ra, rb, 1e-5, 1e-3, &where), 1.0) << what << ": " << where;
      RealRun ga, gb;
      ga.params = ra.grads;
      gb.params = rb.grads;
      ASSERT_FALSE(ga.params.empty()) << what;
      EXPECT_LE(max_violation(ga, gb, 1e-6, 1e-4, &where), 1.0) << what << " grads: " << where;
      for (size_t k = 0; k < ra.mean_loss.size(); ++k)
        EXPECT_NEAR(ra.mean_loss[k], rb.mean_loss[k], 1e-5) << what;
    }
  }
}

// With uneven batches the two differ: the global-token loss trains as one rank holding every
// sequence of the step (rank 0 one sequence, rank 1 three, against one rank with all four),
// while the mean loss weighs rank 0's one sequence as much as rank 1's three.
TEST(RealTraining, GlobalValidTokensLossWeighsUnevenBatchesByTokens) {
  TinyOptions o;
  o.mesh = {2};
  o.steps = 2;
  o.seq = 8;
  o.batch = 1;
  json a = tiny_scenario_json(o);
  a["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}};
  a["training"]["rank_batch"] = {{{"rank", 1}, {"batch", 3}}};
  json mean = a;
  a["model"] = {{"name", "tiny-llama"},
                {"implementation", {{"loss_normalization", "global_valid_tokens"}}}};
  TinyOptions one = o;
  one.mesh = {1};
  one.batch = 4;
  json b = tiny_scenario_json(one);
  b["training"]["optimizer"] = a["training"]["optimizer"];
  RealRun ra = run_real(parse_scenario(a)), rb = run_real(parse_scenario(b)),
          rm = run_real(parse_scenario(mean));
  std::string where;
  EXPECT_LE(max_violation(ra, rb, 1e-5, 1e-3, &where), 1.0) << where;
  EXPECT_GT(max_violation(rm, rb, 1e-5, 1e-3, &where), 1.0)
      << "the mean loss should not match one rank with the whole batch";
}

// FSDPModule.set_gradient_divide_factor(f) on every unit (fsdp.gradient_divide_factor): the
// reduced gradients are the summed ones over f, whichever collective does it (a premul sum, an
// AVG when f is the shard size, or SUM and a divide with set_force_sum_reduction_for_comms).
TEST(RealTraining, GradientDivideFactorScalesTheReducedGradients) {
  struct Case {
    std::vector<int> mesh;
    double factor;
    bool force_sum;
  };
  for (const Case& c : {Case{{2}, 1.0, false}, Case{{2}, 2.0, false}, Case{{2}, 0.5, true},
                        Case{{2, 2}, 1.0, false}, Case{{2, 2}, 8.0, true}}) {
    TinyOptions o;
    o.mesh = c.mesh;
    o.steps = 1;
    o.seq = 8;
    json a = tiny_scenario_json(o);
    json b = a;
    a["fsdp"]["gradient_divide_factor"] = c.factor;
    a["fsdp"]["force_sum_reduction_for_comms"] = c.force_sum;
    runner::RankOptions ro;
    ro.collect_grads = true;
    RealRun ra = run_real(parse_scenario(a), -1, ro), rb = run_real(parse_scenario(b), -1, ro);
    int dp = 1;
    for (int d : c.mesh) dp *= d;
    // FSDP2's default divides by dp: the factor's gradients are those times dp / factor.
    RealRun ga, gb;
    ga.params = ra.grads;
    gb.params = rb.grads;
    for (auto& [name, v] : gb.params)
      for (float& x : v) x = static_cast<float>(x * dp / c.factor);
    ASSERT_FALSE(ga.params.empty());
    std::string where;
    EXPECT_LE(max_violation(ga, gb, 1e-6, 1e-4, &where), 1.0)
        << "factor " << c.factor << (c.force_sum ? " (forced sum)" : "") << ": " << where;
  }
}

// A tied Llama under torchtitan's [tok_embeddings, norm, output] unit trains as with the tied
// weight in the root unit (fsdp.units "blocks"): the first step's gradients (the tied weight's
// is the sum of the output's and the embedding's uses, reduce-scattered once) and the
// parameters after 2 steps agree within NOTE [fp32 tolerance], with the logits loss and the
// chunked loss, whether the unit reshards after forward or not. ShardedEqualsUnsharded runs one
// layout at two sizes; this ties the new layout to the existing one.
TEST(RealTraining, TiedEmbeddingsUnitTrainsAsTheRootUnit) {
  for (const char* loss : {"fp32_logits", "chunked"}) {
    for (bool keep : {false, true}) {
      TinyOptions o;
      o.mesh = {2};
      o.steps = 2;
      o.seq = 8;
      json a = tiny_scenario_json(o);
      a["model"] = {{"name", "tiny-llama"},
                    {"tie_embeddings", true},
                    {"implementation", {{"loss", loss}, {"loss_chunks", 4}}}};
      a["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}};
      json b = a;
      a["fsdp"]["units"] = "embed_blocks_head";
      if (keep) a["fsdp"]["per_unit"] = {{"output", {{"reshard_after_forward", false}}}};
      b["fsdp"]["units"] = "blocks";
      b["fsdp"]["per_unit"] = {
          {"root", {{"reshard_after_forward", false}}}};  // the chunks call the root's output
      runner::RankOptions ro;
      ro.collect_grads = true;
      RealRun ra = run_real(parse_scenario(a), -1, ro), rb = run_real(parse_scenario(b), -1, ro);
      const std::string what = std::string(loss) + (keep ? ", unit kept unsharded" : "");
      ASSERT_TRUE(ra.grads.count("tok_embeddings.weight")) << what;
      RealRun ga, gb;
      ga.params = ra.grads;
      gb.params = rb.grads;
      std::string where;
      EXPECT_LE(max_violation(ga, gb, 1e-6, 1e-4, &where), 1.0) << what << ": gradient " << where;
      EXPECT_LE(max_violation(ra, rb, 1e-5, 1e-3, &where), 1.0) << what << ": " << where;
      for (size_t k = 0; k < ra.mean_loss.size(); ++k)
        EXPECT_NEAR(ra.mean_loss[k], rb.mean_loss[k], 1e-5) << what;
    }
  }
}

TEST(RealTraining, ActivationCheckpointingChangesNoNumber) {
  TinyOptions o;
  o.mesh = {2};
  o.steps = 2;
  o.seq = 8;
  RealRun base = run_real(tiny_scenario(o));
  for (json ac :
       {json("full"), json("selective_op"), json{{"mode", "selective_layer"}, {"every", 2}}}) {
    o.activation_checkpointing = ac;
    RealRun r = run_real(tiny_scenario(o));
    std::string where;
    EXPECT_EQ(max_violation(r, base, 0, 0, &where), 0.0) << ac.dump() << ": " << where;
    EXPECT_EQ(r.mean_loss, base.mean_loss) << ac.dump();
  }
}

// NOTE [bf16 tolerance]: with bf16 parameters the unsharded reference rounds each gradient
// once over the whole batch, the sharded run once per rank before the fp32 reduce-scatter:
// differences of a few bf16 ulps (2^-8 relative) in gradients, so |a - b| <= 1e-3 + 2e-2 |b|.
TEST(RealTraining, MixedPrecisionMatchesUnshardedBf16) {
  TinyOptions o;
  o.mesh = {2};
  o.steps = 2;
  o.seq = 8;
  o.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  json j = tiny_scenario_json(o);
  j["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}};
  RealRun sharded = run_real(parse_scenario(j));
  RealRun ref = run_real(parse_scenario(unsharded(j)));
  std::string where;
  EXPECT_LE(max_violation(sharded, ref, 1e-3, 2e-2, &where), 1.0) << where;
  for (size_t k = 0; k < ref.mean_loss.size(); ++k)
    EXPECT_NEAR(sharded.mean_loss[k], ref.mean_loss[k], 2e-2);
}

TEST(RealTraining, TinyLlamaLossFalls) {
  TinyOptions o;
  o.mesh = {2};
  o.steps = 30;
  o.seq = 32;
  o.batch = 4;
  json j = tiny_scenario_json(o);
  j["training"]["optimizer"] = {{"lr", 3e-3}, {"weight_decay", 0.0}};
  RealRun r = run_real(parse_scenario(j));
  ASSERT_EQ(r.mean_loss.size(), 30u);
  EXPECT_NEAR(r.mean_loss.front(), std::log(256.0), 0.3);  // a fresh model predicts ~uniform bytes
  EXPECT_LT(r.mean_loss.back(), r.mean_loss.front() - 1.5) << "loss did not fall";
}

// An uneven batch: rank 1 trains on more sequences. Its program differs, so the simulator plays
// every rank; the predicted per-rank peaks still equal the measured ones, and the ranks'
// peaks differ (rank 1 keeps more activations).
TEST(RealTraining, UnevenBatchPredictedEqualsMeasuredPerRank) {
  TinyOptions o;
  o.mesh = {2};
  o.steps = 2;
  o.seq = 16;
  o.batch = 1;
  json j = tiny_scenario_json(o);
  j["training"]["rank_batch"] = {{{"rank", 1}, {"batch", 4}}};
  Scenario s = parse_scenario(j);
  sim::SimulationReport pred = sim::simulate_scenario(s);
  ASSERT_TRUE(pred.ok()) << problems_text(pred);
  ASSERT_TRUE(pred.simulated_all_ranks);
  RealRun real = run_real(s);
  std::map<int, uint64_t> predicted;
  for (const auto& c : pred.classes)
    for (int r : c.ranks) {
      predicted[r] = c.peak_allocated_bytes;
      EXPECT_EQ(real.ranks[r].report.peak_allocated_bytes, c.peak_allocated_bytes) << "rank " << r;
      EXPECT_EQ(real.ranks[r].report.peak_reserved_bytes, c.peak_reserved_bytes) << "rank " << r;
    }
  EXPECT_GT(predicted[1], predicted[0]);
}

// Float8 linears with FSDP2's float8 all-gather (scenarios/tiny-llama-float8-cpu2.json's
// settings), scales dynamic and precomputed: each rank's copy-in stream all-reduces amaxes while
// its all-gather and reduce-scatter streams run theirs, and with precomputed scales the compute
// stream all-reduces too. tools/test.sh runs this under TSan, so every buffer, group and device
// those stream threads share is checked; both runs keep predicted == measured to the byte and
// train to the same losses (the precomputed scale is the dynamic one's formula).
TEST(RealTraining, Float8AllGatherStreamsShareNothingUnguarded) {
  std::vector<std::vector<double>> losses;
  for (bool precompute : {false, true}) {
    TinyOptions o;
    o.mesh = {2};
    o.steps = 3;
    o.seq = 16;
    o.batch = 2;
    json j = tiny_scenario_json(o);
    j["training"]["float8"] = {{"recipe", "tensorwise"},
                               {"enable_fsdp_float8_all_gather", true},
                               {"precompute_float8_dynamic_scale_for_fsdp", precompute},
                               {"filter_fqns", {"output"}}};
    Scenario s = parse_scenario(j);
    sim::SimulationReport pred = sim::simulate_scenario(s);
    ASSERT_TRUE(pred.ok()) << problems_text(pred);
    RealRun real = run_real(s);
    for (const auto& c : pred.classes)
      for (int r : c.ranks) {
        EXPECT_EQ(real.ranks[r].report.peak_allocated_bytes, c.peak_allocated_bytes)
            << "rank " << r << (precompute ? " precomputed" : " dynamic");
        EXPECT_EQ(real.ranks[r].report.peak_reserved_bytes, c.peak_reserved_bytes)
            << "rank " << r << (precompute ? " precomputed" : " dynamic");
      }
    ASSERT_EQ(real.mean_loss.size(), 3u);
    losses.push_back(real.mean_loss);
  }
  EXPECT_EQ(losses[0], losses[1]);
}
