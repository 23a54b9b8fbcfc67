// `checkpoint export` (NOTE [Hugging Face layouts]): Hugging Face names for every Llama and
// GPT-2 parameter, GPT-2's Conv1D weights transposed, optimizer state left out, the sharded
// layout's index covering every tensor, and every byte equal to the checkpoint's.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "core/checkpoint/dcp.h"
#include "core/checkpoint/export.h"
#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"
#include "core/model/transformer.h"
#include "tests/support/temp_dir.h"

namespace fullshard {
namespace {
namespace fs = std::filesystem;

using testing::TempDir;

ModelConfig tiny(ModelArch arch) {
  ModelConfig c;
  c.arch = arch;
  c.name = "t";
  c.vocab_size = 11;
  c.dim = 4;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.ffn_dim = 6;
  c.max_seq_len = 5;
  return c;
}

TEST(HfNames, EveryParameterOfBothArchitecturesHasAUniqueName) {
  for (ModelArch arch : {ModelArch::kLlama, ModelArch::kGpt2}) {
    Transformer model(tiny(arch));
    const std::string a = arch == ModelArch::kLlama ? "llama" : "gpt2";
    std::set<std::string> seen;
    model.root().for_each_param([&](Param& p) {
      const auto n = hf_tensor_name(a, p.fqn);
      ASSERT_TRUE(n.has_value()) << a << " " << p.fqn;
      EXPECT_TRUE(seen.insert(n->name).second) << n->name;
      EXPECT_EQ(n->transpose,
                a == "gpt2" && p.shape.size() == 2 && p.fqn.find(".c_") != std::string::npos)
          << p.fqn;
    });
  }
  EXPECT_EQ(hf_tensor_name("llama", "layers.3.attention.wk.weight")->name,
            "model.layers.3.self_attn.k_proj.weight");
  EXPECT_EQ(hf_tensor_name("llama", "layers.0.feed_forward.w2.weight")->name,
            "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(hf_tensor_name("gpt2", "layers.1.attn.c_attn.weight")->name,
            "transformer.h.1.attn.c_attn.weight");
  EXPECT_EQ(hf_tensor_name("gpt2", "wpe.weight")->name, "transformer.wpe.weight");
  EXPECT_FALSE(hf_tensor_name("llama", "layers.0.attention.wz.weight").has_value());
  EXPECT_FALSE(hf_tensor_name("llama", "wte.weight").has_value());
}

// A committed checkpoint of model `c`'s parameters saved by 2 ranks; element k of tensor i is
// 1000 i + k. Returns fqn -> global values.
std::map<std::string, std::vector<float>> save_model(const std::string& root, const ModelConfig& c) {
  Transformer model(c);
  const int world = 2;
  begin_checkpoint(root, 1, "test");
  CheckpointMetadata m;
  m.arch = hf_arch(c);
  m.hf_rope_pairing_differs = hf_rope_pairing_differs(c);
  m.step = m.next_step = 1;
  m.world_size = m.shard = world;
  std::map<std::string, std::vector<float>> values;
  std::vector<std::pair<std::string, Shape>> params;
  model.root().for_each_param([&](Param& p) { params.push_back({p.fqn, p.shape}); });
  for (size_t i = 0; i < params.size(); ++i) {
    auto& v = values[params[i].first];
    v.resize(static_cast<size_t>(numel(params[i].second)));
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(1000 * i + k);
    m.tensors.push_back(sharded_tensor("param/" + params[i].first, "F32", params[i].second, world));
    m.tensors.push_back(
        sharded_tensor("exp_avg/" + params[i].first, "F32", params[i].second, world));
  }
  for (int r = 0; r < world; ++r) {
    m.files.push_back({shard_file_name(r, world), 0});
    std::vector<SafetensorsTensor> out;
    for (const auto& [fqn, shape] : params) {
      const int64_t off = shard_row_offset(shape[0], world, r) * row_numel(shape);
      for (const char* kind : {"param/", "exp_avg/"})
        out.push_back(
            {kind + fqn, "F32", sharded_shape(shape, world, r), values[fqn].data() + off});
    }
    write_safetensors((fs::path(root) / step_folder_name(1) / shard_file_name(r, world)).string(),
                      out, {}, "test");
  }
  commit_checkpoint(root, m, "test");
  return values;
}

TEST(CheckpointExport, Gpt2ConsolidatedWithConv1DTransposes) {
  TempDir d;
  const auto values = save_model(d.path(), tiny(ModelArch::kGpt2));
  CheckpointReader reader(resolve_checkpoint(d.path(), "test"));
  ExportOptions o;
  o.out = d.path() + "/model.safetensors";
  const ExportResult res = export_safetensors(reader, o);
  EXPECT_EQ(res.tensors, values.size());  // no optimizer state
  SafetensorsReader st(o.out);
  EXPECT_EQ(st.header().metadata.at("format"), "pt");
  EXPECT_EQ(st.header().tensors.size(), values.size());
  for (const auto& [fqn, v] : values) {
    const auto n = *hf_tensor_name("gpt2", fqn);
    const SafetensorsEntry& e = st.entry(n.name);
    std::vector<float> got(v.size());
    st.read(n.name, 0, got.size() * 4, got.data());
    if (!n.transpose) {
      EXPECT_EQ(got, v) << fqn;
      continue;
    }
    // ours [out, in] -> Hugging Face Conv1D [in, out]
    const int64_t rows = e.shape[1], cols = e.shape[0];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(got[static_cast<size_t>(c * rows + r)], v[static_cast<size_t>(r * cols + c)])
            << fqn;
  }
  EXPECT_EQ(st.entry("transformer.h.0.attn.c_attn.weight").shape, (Shape{4, 12}));
  EXPECT_EQ(st.entry("transformer.h.0.mlp.c_proj.weight").shape, (Shape{6, 4}));
}

TEST(CheckpointExport, LlamaShardedLayoutAndFullshardNames) {
  TempDir d;
  const auto values = save_model(d.path(), tiny(ModelArch::kLlama));
  CheckpointReader reader(resolve_checkpoint(d.path(), "test"));
  ExportOptions o;
  o.out = d.path() + "/hf";
  o.max_shard_bytes = 200;
  const ExportResult res = export_safetensors(reader, o);
  ASSERT_GT(res.files.size(), 3u);
  std::ifstream f(res.files.back());
  const auto index = nlohmann::json::parse(f);
  EXPECT_EQ(index["weight_map"].size(), values.size());
  uint64_t total = 0;
  for (const auto& [fqn, v] : values) {
    const std::string hf = hf_tensor_name("llama", fqn)->name;
    SafetensorsReader st(d.path() + "/hf/" + index["weight_map"][hf].get<std::string>());
    std::vector<float> got(v.size());
    st.read(hf, 0, got.size() * 4, got.data());
    EXPECT_EQ(got, v) << fqn;
    total += v.size() * 4;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  o.out = d.path() + "/ours.safetensors";
  o.max_shard_bytes = 0;
  o.hf_names = false;
  export_safetensors(reader, o);
  SafetensorsReader ours(o.out);
  EXPECT_EQ(ours.entry("layers.1.attention.wq.weight").shape, (Shape{4, 4}));
}

// The MoE and MLA models of the zoo, and a Mixtral, name
// every parameter uniquely; routed experts are per-expert names.
ModelConfig tiny_mixtral() {
  ModelConfig c = *find_model("tiny-moe");
  c.name = "tiny-mixtral";
  c.moe.shared_expert_dim = 0;
  return c;
}

TEST(HfNames, MoeAndLatentAttentionModelsNameEveryParameter) {
  for (const ModelConfig& c : {*find_model("tiny-deepseek"), *find_model("tiny-moe"),
                               *find_model("qwen3-30b-a3b"), tiny_mixtral()}) {
    Transformer model(c);
    const std::string a = hf_arch(c);
    std::set<std::string> seen;
    int per_expert = 0;
    model.root().for_each_param([&](Param& p) {
      const auto n = hf_tensor_name(a, p.fqn);
      ASSERT_TRUE(n.has_value()) << a << " " << p.fqn;
      EXPECT_FALSE(n->transpose) << p.fqn;
      EXPECT_EQ(n->per_expert, p.fqn.find(".moe.experts.") != std::string::npos) << p.fqn;
      per_expert += n->per_expert;
      EXPECT_TRUE(seen.insert(n->name).second) << n->name;
    });
    EXPECT_EQ(per_expert, 3 * c.moe.moe_layer_count(c.n_layers)) << a;
  }
  EXPECT_EQ(hf_arch(*find_model("tiny-deepseek")), "deepseek_v3");
  EXPECT_EQ(hf_arch(*find_model("qwen3-30b-a3b")), "qwen3_moe");
  EXPECT_EQ(hf_arch(*find_model("mixtral-8x7b")), "mixtral");
  EXPECT_EQ(hf_arch(*find_model("llama3.1-8b")), "llama");
  const auto w1 = *hf_tensor_name("mixtral", "layers.3.moe.experts.w1");
  EXPECT_EQ(w1.expert_name(7), "model.layers.3.block_sparse_moe.experts.7.w1.weight");
  EXPECT_EQ(hf_tensor_name("qwen3_moe", "layers.0.moe.experts.w2")->expert_name(1),
            "model.layers.0.mlp.experts.1.down_proj.weight");
  EXPECT_EQ(hf_tensor_name("qwen3_moe", "layers.2.attention.q_norm.weight")->name,
            "model.layers.2.self_attn.q_norm.weight");
  EXPECT_EQ(hf_tensor_name("deepseek_v3", "layers.2.attention.q_norm.weight")->name,
            "model.layers.2.self_attn.q_a_layernorm.weight");
  EXPECT_EQ(hf_tensor_name("deepseek_v3", "layers.1.moe.expert_bias")->name,
            "model.layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(hf_tensor_name("deepseek_v3", "layers.1.attention.wkv_a.weight")->name,
            "model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
  EXPECT_FALSE(hf_tensor_name("mixtral", "layers.1.moe.shared_experts.w1.weight").has_value());
  EXPECT_FALSE(hf_tensor_name("mixtral", "layers.1.moe.experts.w1.lora_A.weight").has_value());
}

// Export with Hugging Face names writes a routed experts' weight as E tensors, expert e's slice
// [e] each, as the hub's files hold them; --dcp refuses that naming for them.
TEST(CheckpointExport, RoutedExpertsAsOneTensorPerExpert) {
  ModelConfig deepseek = *find_model("tiny-deepseek");
  deepseek.implementation.rope = RopeImpl::kComplex;  // DeepSeek-V3's files' RoPE pairing
  for (const ModelConfig& c : {deepseek, tiny_mixtral()}) {
    TempDir d;
    const auto values = save_model(d.path(), c);
    CheckpointReader reader(resolve_checkpoint(d.path(), "test"));
    ExportOptions o;
    o.out = d.path() + "/model.safetensors";
    const ExportResult res = export_safetensors(reader, o);
    SafetensorsReader st(o.out);
    EXPECT_EQ(st.header().tensors.size(), res.tensors);
    size_t expected = 0;
    for (const auto& [fqn, v] : values) {
      const auto n = *hf_tensor_name(hf_arch(c), fqn);
      if (!n.per_expert) {
        ++expected;
        std::vector<float> got(v.size());
        st.read(n.name, 0, got.size() * 4, got.data());
        EXPECT_EQ(got, v) << fqn;
        continue;
      }
      const int64_t E = c.moe.num_experts, each = static_cast<int64_t>(v.size()) / E;
      for (int64_t e = 0; e < E; ++e, ++expected) {
        const SafetensorsEntry& entry = st.entry(n.expert_name(e));
        EXPECT_EQ(numel(entry.shape), each) << n.expert_name(e);
        EXPECT_EQ(entry.shape.size(), 2u) << n.expert_name(e);
        std::vector<float> got(static_cast<size_t>(each));
        st.read(n.expert_name(e), 0, got.size() * 4, got.data());
        EXPECT_TRUE(std::equal(got.begin(), got.end(), v.begin() + e * each)) << n.expert_name(e);
      }
    }
    EXPECT_EQ(res.tensors, expected) << hf_arch(c);
    DcpExportOptions dcp;
    dcp.out = d.path() + "/dcp";
    try {
      export_dcp(reader, dcp);
      ADD_FAILURE() << "--dcp with Hugging Face names of routed experts";
    } catch (const InputError& e) {
      EXPECT_EQ(e.where(), "--names") << e.what();
    }
    dcp.hf_names = false;
    EXPECT_NO_THROW(export_dcp(reader, dcp));
  }
}

// (NOTE [Rotary pairing of weight files] in core/checkpoint/hf_names.h) A Llama trained with complex RoPE pairs q / k columns
// adjacently, unlike Hugging Face's files; its checkpoint says so and HF-name export is refused
// (fullshard names still export). The permutation on load: the rows of every head move.
TEST(CheckpointExport, OtherRopePairingIsRecordedAndRefusedForHfNames) {
  ModelConfig c = tiny(ModelArch::kLlama);
  c.implementation.rope = RopeImpl::kComplex;
  TempDir d;
  save_model(d.path(), c);
  CheckpointReader reader(resolve_checkpoint(d.path(), "test"));
  EXPECT_EQ(reader.metadata().hf_rope_pairing_differs, std::optional<bool>(true));
  ExportOptions o;
  o.out = d.path() + "/model.safetensors";
  try {
    export_safetensors(reader, o);
    ADD_FAILURE() << "HF names for a complex-RoPE Llama";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "--names") << e.what();
  }
  o.hf_names = false;
  EXPECT_NO_THROW(export_safetensors(reader, o));
  // head_dim 2 (dim 4, 2 heads): adjacent row 2i + j <- half row j + i, per head.
  EXPECT_EQ(hf_rope_row_order(c, "layers.0.attention.wq.weight", 4),
            (std::vector<int64_t>{0, 1, 2, 3}));
  c.dim = 8;  // head_dim 4
  EXPECT_EQ(hf_rope_row_order(c, "layers.0.attention.wk.weight", 4),
            (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(hf_rope_row_order(c, "layers.0.attention.wo.weight", 8), std::vector<int64_t>{});
  c.implementation.rope = RopeImpl::kFused;
  EXPECT_EQ(hf_rope_row_order(c, "layers.0.attention.wk.weight", 4), std::vector<int64_t>{});
  // DeepSeek-V3 (adjacent files) under fused RoPE: only each head's rope rows [nope, nope + r).
  ModelConfig ds = *find_model("tiny-deepseek");
  const auto order = hf_rope_row_order(ds, "layers.1.attention.wkv_a.weight",
                                       ds.mla.kv_lora_rank + ds.mla.qk_rope_head_dim);
  ASSERT_EQ(order.size(), static_cast<size_t>(ds.mla.kv_lora_rank + 8));
  const int64_t k0 = ds.mla.kv_lora_rank;
  for (int64_t r = 0; r < k0; ++r) EXPECT_EQ(order[static_cast<size_t>(r)], r);
  EXPECT_EQ((std::vector<int64_t>(order.begin() + k0, order.end())),
            (std::vector<int64_t>{k0, k0 + 2, k0 + 4, k0 + 6, k0 + 1, k0 + 3, k0 + 5, k0 + 7}));
}

}  // namespace
}  // namespace fullshard
