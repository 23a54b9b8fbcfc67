// model.implementation: presets, field overrides, and one test per error (the JSON path, the
// bad value and the valid spellings in a one-line message).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/scenario/scenario.h"

namespace fullshard {
namespace {

using nlohmann::json;

json with_impl(const json& impl) {
  json j = json::parse(R"({"model": {"name": "tiny-llama"}, "training": {"seq_len": 8},
                           "hardware": {"profile": "cpu"}})");
  j["model"]["implementation"] = impl;
  return j;
}

ModelImplementation parse_impl(const json& impl) {
  return parse_scenario(with_impl(impl)).model.implementation;
}

void expect_error(const json& impl, const std::string& where,
                  const std::vector<std::string>& parts) {
  try {
    parse_impl(impl);
    ADD_FAILURE() << "expected an InputError at " << where << " for " << impl.dump();
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.where(), where) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    for (const auto& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << "missing '" << p << "' in: " << what;
  }
}

void expect_root_reshard_error(const json& j) {
  try {
    parse_scenario(j);
    ADD_FAILURE() << "chunked loss with a resharding root accepted: " << j.dump();
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "model.implementation.loss") << e.what();
    EXPECT_NE(std::string(e.what()).find("embed_blocks_head"), std::string::npos) << e.what();
  }
}

TEST(ModelImplementation, DefaultIsTheFullshardPreset) {
  json j = with_impl("fullshard");
  j["model"].erase("implementation");
  const ModelImplementation m = parse_scenario(j).model.implementation;
  EXPECT_EQ(m.preset, "fullshard");
  EXPECT_EQ(m.loss, LossImpl::kFp32Logits);
  EXPECT_FALSE(m.keep_logits);
  EXPECT_EQ(m.rms_norm, NormImpl::kFused);
  EXPECT_EQ(m.rope, RopeImpl::kFused);
  EXPECT_EQ(m.gqa, GqaImpl::kNative);
  EXPECT_EQ(m.attention, AttentionImpl::kFlash);
  EXPECT_FALSE(m.compile);
  // A zoo name as a string gets the default as well.
  j["model"] = "tiny-llama";
  EXPECT_EQ(parse_scenario(j).model.implementation.preset, "fullshard");
}

TEST(ModelImplementation, PresetByNameAndOverrides) {
  EXPECT_EQ(parse_impl("fullshard").preset, "fullshard");
  const ModelImplementation m = parse_impl({{"preset", "fullshard"}, {"loss", "fp32_logits"}});
  EXPECT_EQ(m.loss, LossImpl::kFp32Logits);
  // Without "preset" the overrides apply to the default.
  EXPECT_EQ(parse_impl(json::object()).preset, "fullshard");
}

TEST(ModelImplementation, EveryPresetIsKnownAndUnbuiltOnesAreRefused) {
  for (const auto& name : implementation_presets()) {
    auto p = find_implementation_preset(name);
    ASSERT_TRUE(p) << name;
    EXPECT_EQ(p->preset, name);
    if (unbuilt_variants(*p).empty()) {
      EXPECT_EQ(parse_impl(name).preset, name);
    } else {
      expect_error(name, "model.implementation",
                   {name, unbuilt_variants(*p)[0], "does not model yet"});
    }
  }
  // torchtitan main (b5bcd76): ChunkedLossWrapper with 8 chunks.
  const ModelImplementation tt = parse_impl("torchtitan");
  EXPECT_EQ(tt.loss, LossImpl::kChunked);
  EXPECT_EQ(tt.loss_chunks, 8);
}

TEST(ModelImplementation, ChunkedLossAndItsLimits) {
  EXPECT_EQ(parse_impl({{"loss", "chunked"}, {"loss_chunks", 4}}).loss_chunks, 4);
  // tiny-llama here: batch 1 x seq_len 8 = 8 tokens per micro-batch.
  expect_error({{"loss", "chunked"}, {"loss_chunks", 3}}, "model.implementation.loss_chunks",
               {"is 3", "8 tokens", "divisor of 8"});
  expect_error({{"loss", "chunked"}, {"loss_chunks", 0}}, "model.implementation.loss_chunks",
               {"0"});
  expect_error({{"loss", "chunked"}, {"keep_logits", true}}, "model.implementation.keep_logits",
               {"chunked"});
  // The output projection runs after the root's forward: a root that reshards is refused.
  json r = with_impl({{"loss", "chunked"}});
  r["fsdp"] = {{"reshard_after_forward", true}};
  expect_root_reshard_error(r);
  r["fsdp"]["per_unit"] = {{"root", {{"reshard_after_forward", false}}}};
  EXPECT_EQ(parse_scenario(r).model.implementation.loss, LossImpl::kChunked);
  r["fsdp"]["units"] = "embed_blocks_head";
  r["fsdp"].erase("per_unit");
  EXPECT_EQ(parse_scenario(r).fsdp.units, ShardingUnits::kEmbedBlocksHead);
  json g = with_impl({{"loss", "chunked"}});
  g["model"]["name"] = "tiny-gpt2";
  try {
    parse_scenario(g);
    ADD_FAILURE() << "chunked loss on GPT-2 accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "model.implementation.loss") << e.what();
  }
  json t = with_impl({{"loss", "chunked"}});
  t["training"]["seq_len"] = 16;
  t["fsdp"] = {{"mesh", {{"shape", {1, 2}}, {"dim_names", {"shard", "tp"}}}}};
  t["hardware"]["gpus_per_node"] = 2;
  // Under tp the chunks run loss parallel (NOTE [Chunked loss under tp]): accepted with it,
  // refused without it.
  t["fsdp"]["per_unit"] = {{"root", {{"reshard_after_forward", false}}}};
  EXPECT_EQ(parse_scenario(t).model.implementation.loss, LossImpl::kChunked);
  t["tensor_parallel"] = {{"loss_parallel", false}};
  try {
    parse_scenario(t);
    ADD_FAILURE() << "chunked loss with tp and no loss parallel accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "model.implementation.loss") << e.what();
    EXPECT_NE(std::string(e.what()).find("tp 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("loss_parallel"), std::string::npos) << e.what();
  }
}

TEST(ModelImplementation, EmbedBlocksHeadUnits) {
  json j = with_impl("fullshard");
  j["fsdp"] = {{"units", "embed_blocks_head"},
               {"per_unit",
                {{"norm", {{"reshard_after_forward", false}}},
                 {"tok_embeddings", {{"reshard_after_forward", true}}}}}};
  const Scenario s = parse_scenario(j);
  EXPECT_EQ(s.fsdp.units, ShardingUnits::kEmbedBlocksHead);
  EXPECT_EQ(s.fsdp.reshard_for("output").kind,
            ReshardAfterForward::Kind::kFalse);  // "norm" names [norm, output]
  EXPECT_EQ(s.fsdp.reshard_for("tok_embeddings").kind, ReshardAfterForward::Kind::kTrue);
  // "norm" and "output" are one unit.
  j["fsdp"]["per_unit"] = {{"norm", {{"reshard_after_forward", false}}},
                           {"output", {{"reshard_after_forward", true}}}};
  try {
    parse_scenario(j);
    ADD_FAILURE() << "norm and output both named";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("same unit"), std::string::npos) << e.what();
  }
  // Under "blocks" they belong to the root; a GPT-2 (tied) model has no output module.
  j["fsdp"] = {{"units", "blocks"}, {"per_unit", {{"output", {{"reshard_after_forward", false}}}}}};
  try {
    parse_scenario(j);
    ADD_FAILURE() << "output named under units blocks";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("embed_blocks_head"), std::string::npos) << e.what();
  }
  j["fsdp"] = {{"units", "embed_blocks_head"}};
  j["model"]["name"] = "tiny-gpt2";
  try {
    parse_scenario(j);
    ADD_FAILURE() << "embed_blocks_head on GPT-2 accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "fsdp.units") << e.what();
  }
}

// A tied Llama's embedding, final norm and output are one unit (NOTE [Tied embeddings unit]):
// each of the three keys names it, and the chunked loss is accepted for it.
TEST(ModelImplementation, TiedEmbedBlocksHeadUnit) {
  json j = with_impl("fullshard");
  j["model"] = {{"name", "tiny-llama"}, {"tie_embeddings", true}};
  j["fsdp"] = {{"units", "embed_blocks_head"},
               {"per_unit", {{"tok_embeddings", {{"reshard_after_forward", false}}}}}};
  Scenario s = parse_scenario(j);
  EXPECT_EQ(s.fsdp.units, ShardingUnits::kEmbedBlocksHead);
  EXPECT_EQ(s.fsdp.reshard_for("output").kind, ReshardAfterForward::Kind::kFalse);
  EXPECT_EQ(s.fsdp.per_unit_reshard.count("tok_embeddings"), 0u);
  for (const char* other : {"norm", "output"}) {
    j["fsdp"]["per_unit"] = {{"tok_embeddings", {{"reshard_after_forward", false}}},
                             {other, {{"reshard_after_forward", true}}}};
    try {
      parse_scenario(j);
      ADD_FAILURE() << "tok_embeddings and " << other << " both named for a tied model";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("same unit"), std::string::npos) << e.what();
    }
  }
  j["fsdp"]["per_unit"] = {{"wte", {{"reshard_after_forward", false}}}};
  try {
    parse_scenario(j);
    ADD_FAILURE() << "wte named for a Llama";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tied [tok_embeddings, norm, output]"), std::string::npos)
        << e.what();
  }
  // The chunked loss: with the tied unit, and with the output in a root that stays unsharded.
  j["fsdp"].erase("per_unit");
  j["model"]["implementation"] = {{"loss", "chunked"}, {"loss_chunks", 4}};
  EXPECT_EQ(parse_scenario(j).model.implementation.loss, LossImpl::kChunked);
  j["fsdp"] = {{"units", "blocks"}, {"reshard_after_forward", true}};
  expect_root_reshard_error(j);
  j["fsdp"]["per_unit"] = {{"root", {{"reshard_after_forward", false}}}};
  EXPECT_EQ(parse_scenario(j).model.implementation.loss, LossImpl::kChunked);
}

TEST(ModelImplementation, AttentionBackends) {
  EXPECT_EQ(parse_impl({{"attention", "cudnn"}}).attention, AttentionImpl::kCudnn);
  // tiny-llama has 4 query heads over 2 kv heads: PyTorch's efficient backend takes no GQA.
  expect_error({{"attention", "efficient"}}, "model.implementation.attention",
               {"\"efficient\"", "2 kv heads", "4 query heads", "repeat_kv"});
  EXPECT_EQ(parse_impl({{"attention", "efficient"}, {"gqa", "repeat_kv"}}).attention,
            AttentionImpl::kEfficient);
  json gpt2 = with_impl({{"attention", "cudnn"}});
  gpt2["model"] = {{"name", "tiny-gpt2"}, {"implementation", {{"attention", "cudnn"}}}};
  try {
    parse_scenario(gpt2);
    ADD_FAILURE() << "GPT-2 with cudnn attention parsed";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "model.implementation.attention") << e.what();
  }
}

TEST(ModelImplementation, Errors) {
  expect_error("torchtitan-2023", "model.implementation",
               {"\"torchtitan-2023\"", "fullshard", "hf-transformers"});
  expect_error(3, "model.implementation", {"3"});
  expect_error({{"preset", "nope"}}, "model.implementation.preset",
               {"\"nope\"", "torchtitan-2024"});
  expect_error({{"los", "fp32_logits"}}, "model.implementation.los", {"'los'", "'loss'"});
  expect_error({{"rms_norm", "apex"}}, "model.implementation.rms_norm",
               {"\"apex\"", "fused", "eager"});
  expect_error({{"rope", 1}}, "model.implementation.rope", {"complex"});
  expect_error({{"keep_logits", "yes"}}, "model.implementation.keep_logits", {"yes"});
  EXPECT_TRUE(parse_impl({{"compile", true}}).compile);  // built for Llama
  json gpt2 = with_impl({{"compile", true}});
  gpt2["model"]["name"] = "tiny-gpt2";
  try {
    parse_scenario(gpt2);
    ADD_FAILURE() << "compile accepted for GPT-2";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "model.implementation.compile") << e.what();
    EXPECT_NE(std::string(e.what()).find("Llama only"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fullshard
