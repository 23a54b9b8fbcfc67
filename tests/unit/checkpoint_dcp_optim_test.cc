// AdamW's state in DCP's own format (NOTE [AdamW state in DCP]): Python floats pickle as CPython
// writes them; `export --dcp` of a checkpoint with AdamW's state writes get_optimizer_state_dict's
// keys (state.<fqn>.exp_avg / exp_avg_sq with their parameter's chunks, a 0-d float32 step written
// once, param_groups in both layouts as torch.save archives) and reads back to the value; and a
// folder whose optimizer state does not fit the model (a missing key, another shape, another
// optimizer's state, another dtype, steps that differ) is a one-line InputError naming the key;
// state of a tensor the model does not use is ignored, as that tensor is.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "core/checkpoint/dcp.h"
#include "core/checkpoint/dcp_optim.h"
#include "core/checkpoint/export.h"
#include "core/checkpoint/pickle.h"
#include "core/checkpoint/safetensors.h"
#include "core/common/error.h"
#include "core/common/output_file.h"
#include "core/fsdp/shard_layout.h"
#include "core/model/transformer.h"
#include "tests/support/temp_dir.h"

namespace fullshard {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;

const PickleGlobals kAny = [](const std::string&, const std::string&) { return true; };

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Pickle, FloatsAsPythonWritesThem) {
  // pickle.dumps(v, protocol=2), CPython 3.11.
  EXPECT_EQ(pickle_dumps(*py_float(0.001)),
            bytes({0x80, 0x02, 0x47, 0x3f, 0x50, 0x62, 0x4d, 0xd2, 0xf1, 0xa9, 0xfc, 0x2e}));
  EXPECT_EQ(pickle_dumps(*py_float(-2.5)),
            bytes({0x80, 0x02, 0x47, 0xc0, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2e}));
  const std::string betas =
      bytes({0x80, 0x02, 0x47, 0x3f, 0xec, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcd, 0x47, 0x3f,
             0xee, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x86, 0x71, 0x00, 0x2e});  // (0.9, 0.95)
  EXPECT_EQ(pickle_dumps(*py_tuple({py_float(0.9), py_float(0.95)})), betas);
  const PyPtr back = pickle_loads(betas, "t", kAny);
  ASSERT_EQ(back->kind, PyKind::kTuple);
  EXPECT_EQ(back->items[1]->kind, PyKind::kFloat);
  EXPECT_EQ(back->items[1]->f, 0.95);
  EXPECT_TRUE(py_equal(*back, *py_tuple({py_float(0.9), py_float(0.95)})));
  EXPECT_FALSE(py_equal(*py_float(0.0), *py_float(-0.0)));  // bitwise, as a checkpoint's bytes
  // Any cut inside the 8 bytes is a truncation, never a crash.
  for (size_t n = 3; n < 11; ++n)
    EXPECT_NE(error_of([&] {
                pickle_loads(betas.substr(0, n), "f.pkl", kAny);
              }).find("f.pkl: pickle ends at byte"),
              std::string::npos)
        << n;
}

TEST(DcpOptim, ParamGroupIsTorchOptimAdamWsInBothLayouts) {
  const CheckpointAdamW a{1e-3, 0.9, 0.95, 1e-8, 0.1};
  const auto group = adamw_param_group(a);
  std::map<std::string, PyPtr> g(group.begin(), group.end());
  EXPECT_EQ(g.size(), 11u);
  EXPECT_EQ(g["lr"]->f, 1e-3);
  EXPECT_TRUE(py_equal(*g["betas"], *py_tuple({py_float(0.9), py_float(0.95)})));
  EXPECT_EQ(g["weight_decay"]->f, 0.1);
  EXPECT_EQ(g["amsgrad"]->kind, PyKind::kBool);
  EXPECT_EQ(g["amsgrad"]->i, 0);
  EXPECT_EQ(g["decoupled_weight_decay"]->i, 1);
  EXPECT_EQ(g["foreach"]->kind, PyKind::kNone);
  EXPECT_EQ(g["fused"]->kind, PyKind::kNone);

  const std::vector<std::string> fqns{"model.norm.weight", "lm_head.weight"};
  const auto entries = adamw_param_group_entries(a, fqns);
  ASSERT_EQ(entries.size(), 11u + 1u + 11u * fqns.size());
  std::map<std::string, const DcpBytesEntry*> by_key;
  for (const auto& e : entries) by_key[e.fqn] = &e;
  ASSERT_TRUE(by_key.count("param_groups.0.lr"));
  ASSERT_TRUE(by_key.count("param_groups.0.params"));
  ASSERT_TRUE(by_key.count("param_groups.lm_head.weight.betas"));
  ASSERT_TRUE(by_key.count("param_groups.model.norm.weight.decoupled_weight_decay"));
  // Each is a torch.save archive (a stored zip) whose data.pkl is the value's protocol-2 pickle.
  const auto& params = *by_key["param_groups.0.params"];
  EXPECT_EQ(params.archive.substr(0, 4), "PK\x03\x04");
  EXPECT_NE(params.archive.find(pickle_dumps(*py_list({py_str(fqns[0]), py_str(fqns[1])}))),
            std::string::npos);
  EXPECT_NE(params.archive.find("archive/data.pkl"), std::string::npos);
  EXPECT_EQ(params.archive.find("archive/data/0"), std::string::npos);  // no storage
  EXPECT_NE(by_key["param_groups.lm_head.weight.lr"]->archive.find(pickle_dumps(*py_float(1e-3))),
            std::string::npos);
  // planner_data: the nested path of the default layout, the key itself for the flat one.
  EXPECT_TRUE(py_equal(*by_key["param_groups.0.lr"]->path,
                       *py_tuple({py_str("param_groups"), py_int(0), py_str("lr")})));
  EXPECT_TRUE(py_equal(*by_key["param_groups.lm_head.weight.lr"]->path,
                       *py_tuple({py_str("param_groups.lm_head.weight.lr")})));
}

// A committed GPT-2 checkpoint of 2 ranks with AdamW's state: element k of tensor i (param,
// exp_avg, exp_avg_sq of each parameter in turn) is 1000 i + k. Returns name -> global values.
std::map<std::string, std::vector<float>> save_with_state(const std::string& root, bool adamw) {
  ModelConfig c;
  c.arch = ModelArch::kGpt2;
  c.name = "t";
  c.vocab_size = 11;
  c.dim = 4;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.ffn_dim = 6;
  c.max_seq_len = 5;
  Transformer model(c);
  const int world = 2;
  begin_checkpoint(root, 3, "test");
  CheckpointMetadata m;
  m.arch = "gpt2";
  m.step = m.next_step = m.optimizer_steps = 3;
  m.world_size = m.shard = world;
  if (adamw) m.adamw = CheckpointAdamW{2e-3, 0.9, 0.95, 1e-8, 0.1};
  std::map<std::string, std::vector<float>> values;
  std::vector<std::pair<std::string, Shape>> tensors;
  model.root().for_each_param([&](Param& p) {
    for (const char* prefix : {"param/", "exp_avg/", "exp_avg_sq/"})
      tensors.push_back({prefix + p.fqn, p.shape});
  });
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto& v = values[tensors[i].first];
    v.resize(static_cast<size_t>(numel(tensors[i].second)));
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(1000 * i + k);
    m.tensors.push_back(sharded_tensor(tensors[i].first, "F32", tensors[i].second, world));
  }
  for (int r = 0; r < world; ++r) {
    m.files.push_back({shard_file_name(r, world), 0});
    std::vector<SafetensorsTensor> out;
    for (const auto& [name, shape] : tensors)
      out.push_back(
          {name, "F32", sharded_shape(shape, world, r),
           values[name].data() + shard_row_offset(shape[0], world, r) * row_numel(shape)});
    write_safetensors((fs::path(root) / step_folder_name(3) / shard_file_name(r, world)).string(),
                      out, {}, "test");
  }
  commit_checkpoint(root, m, "test");
  return values;
}

std::vector<float> read_f32(DcpReader& r, const std::string& fqn, const ChunkBox& box) {
  std::vector<float> v(static_cast<size_t>(box_numel(box)));
  r.read_box(fqn, box, v.data(), v.size() * 4);
  return v;
}

TEST(DcpOptimExport, WritesGetOptimizerStateDictsKeysAndReadsBack) {
  TempDir d;
  const auto values = save_with_state(d.path() + "/ck", true);
  CheckpointReader reader(resolve_checkpoint(d.path() + "/ck", "test"));
  DcpExportOptions o;
  o.out = d.path() + "/dcp";
  const DcpExportResult res = export_dcp(reader, o);
  const size_t params = values.size() / 3;
  EXPECT_EQ(res.tensors, params);
  EXPECT_EQ(res.optimizer_tensors, 3 * params);  // exp_avg, exp_avg_sq, step
  EXPECT_EQ(res.param_group_entries, 12 + 11 * params);
  EXPECT_TRUE(res.optimizer_note.empty());
  DcpReader r(o.out);
  ASSERT_TRUE(dcp_has_optimizer_state(r.metadata()));
  std::vector<std::pair<std::string, Shape>> located;
  std::vector<std::string> names;
  for (const auto& [name, v] : values) {
    if (name.rfind("param/", 0) != 0) continue;
    const std::string fqn = name.substr(6);
    const HfTensorName n = export_name("gpt2", fqn, true);
    const DcpTensor* p = r.metadata().find(n.name);
    ASSERT_TRUE(p) << n.name;
    located.push_back({n.name, p->shape});
    names.push_back(n.name);
    for (const char* what : {"exp_avg", "exp_avg_sq"}) {
      const DcpTensor* t = r.metadata().find(dcp_optim_state_key(n.name, what));
      ASSERT_TRUE(t) << n.name << " " << what;
      EXPECT_EQ(t->shape, p->shape);
      ASSERT_EQ(t->chunks.size(), p->chunks.size());  // its parameter's chunks (Shard(0))
      for (size_t k = 0; k < t->chunks.size(); ++k) EXPECT_EQ(t->chunks[k].box, p->chunks[k].box);
      const auto got = read_f32(r, t->fqn, full_box(t->shape));
      const auto& want = values.at(std::string(what) + "/" + fqn);
      if (!n.transpose) {
        EXPECT_EQ(got, want) << t->fqn;
        continue;
      }
      const int64_t rows = t->shape[1], cols = t->shape[0];  // a Conv1D's state: transposed too
      for (int64_t a = 0; a < rows; ++a)
        for (int64_t b = 0; b < cols; ++b)
          ASSERT_EQ(got[static_cast<size_t>(b * rows + a)],
                    want[static_cast<size_t>(a * cols + b)]);
    }
    const DcpTensor* step = r.metadata().find(dcp_optim_state_key(n.name, "step"));
    ASSERT_TRUE(step);
    EXPECT_TRUE(step->shape.empty());  // 0-d, written once: one chunk in __0_0.distcp
    ASSERT_EQ(step->chunks.size(), 1u);
    EXPECT_EQ(step->chunks[0].file, "__0_0.distcp");
    EXPECT_EQ(step->dtype, "F32");
  }
  EXPECT_NO_THROW(check_dcp_adamw_state(r.metadata(), located, o.out));
  EXPECT_EQ(read_dcp_adamw_step(r, names), 3);
  const auto& nt = r.metadata().non_tensors;
  EXPECT_NE(std::find(nt.begin(), nt.end(), "param_groups.0.params"), nt.end());
  EXPECT_NE(std::find(nt.begin(), nt.end(), "param_groups.transformer.wte.weight.lr"), nt.end());

  // --model-only: the parameters alone, as before.
  o.out = d.path() + "/model";
  o.optimizer = false;
  const DcpExportResult m = export_dcp(reader, o);
  EXPECT_EQ(m.optimizer_tensors, 0u);
  DcpReader rm(o.out);
  EXPECT_FALSE(dcp_has_optimizer_state(rm.metadata()));
  EXPECT_TRUE(rm.metadata().non_tensors.empty());
}

TEST(DcpOptimExport, ACheckpointWithoutHyperparametersExportsTheParametersAndSaysWhy) {
  TempDir d;
  save_with_state(d.path() + "/ck", false);
  CheckpointReader reader(resolve_checkpoint(d.path() + "/ck", "test"));
  DcpExportOptions o;
  o.out = d.path() + "/dcp";
  const DcpExportResult res = export_dcp(reader, o);
  EXPECT_EQ(res.optimizer_tensors, 0u);
  EXPECT_NE(res.optimizer_note.find("predates recorded AdamW hyperparameters"), std::string::npos);
  EXPECT_FALSE(dcp_has_optimizer_state(DcpReader(o.out).metadata()));
}

// A DCP metadata of parameter "w" [4, 2] with the given state entries (no files needed).
DcpMetadata meta_with(const std::vector<DcpTensor>& state, std::vector<std::string> bytes = {}) {
  DcpMetadata m;
  m.tensors.push_back({"w", "F32", {4, 2}, {}, nullptr});
  for (const auto& t : state) m.tensors.push_back(t);
  m.non_tensors = std::move(bytes);
  return m;
}

TEST(DcpOptim, StateThatDoesNotFitTheModelIsAOneLineErrorNamingTheKey) {
  const std::vector<std::pair<std::string, Shape>> params{{"w", {4, 2}}};
  const DcpTensor avg{"state.w.exp_avg", "F32", {4, 2}, {}, nullptr};
  const DcpTensor sq{"state.w.exp_avg_sq", "F32", {4, 2}, {}, nullptr};
  const DcpTensor step{"state.w.step", "F32", {}, {}, nullptr};
  auto err = [&](const DcpMetadata& m) {
    return error_of([&] { check_dcp_adamw_state(m, params, "pt"); });
  };
  EXPECT_EQ(err(meta_with({avg, sq, step})), "");
  EXPECT_FALSE(dcp_has_optimizer_state(meta_with({})));
  const std::string missing = err(meta_with({avg, step}));
  EXPECT_NE(missing.find("pt: 'state.w.exp_avg_sq': is missing"), std::string::npos) << missing;
  EXPECT_EQ(missing.find('\n'), std::string::npos);
  DcpTensor wide = sq;
  wide.shape = {4, 3};
  EXPECT_NE(err(meta_with({avg, wide, step}))
                .find("'state.w.exp_avg_sq': is [4, 3] but its parameter is [4, 2]"),
            std::string::npos);
  const DcpTensor momentum{"state.w.momentum_buffer", "F32", {4, 2}, {}, nullptr};
  EXPECT_NE(err(meta_with({momentum}))
                .find("'state.w.momentum_buffer': is 'momentum_buffer', not AdamW's state"),
            std::string::npos);
  const DcpTensor amsgrad{"state.w.max_exp_avg_sq", "F32", {4, 2}, {}, nullptr};
  EXPECT_NE(err(meta_with({avg, sq, step, amsgrad})).find("'state.w.max_exp_avg_sq'"),
            std::string::npos);
  const DcpTensor other{"state.v.exp_avg", "F32", {4, 2}, {}, nullptr};
  EXPECT_EQ(err(meta_with({avg, sq, step, other})), "");  // not the model's: ignored
  DcpTensor half = avg;
  half.dtype = "BF16";
  EXPECT_NE(err(meta_with({half, sq, step})).find("'state.w.exp_avg': is BF16, not F32"),
            std::string::npos);
  DcpTensor vec_step = step;
  vec_step.shape = {2};
  EXPECT_NE(err(meta_with({avg, sq, vec_step})).find("'state.w.step': is F32 [2], not the 0-d"),
            std::string::npos);
  EXPECT_NE(err(meta_with({avg, sq}, {"state.w.step"})).find("'state.w.step': is a Python value"),
            std::string::npos);
}

// A DCP folder holding only 0-d step tensors of the given values (written as export does).
std::string write_steps(const std::string& dir,
                        const std::vector<std::pair<std::string, float>>& steps) {
  fs::create_directories(dir);
  DcpMetadata m;
  std::string file;
  for (const auto& [name, v] : steps) {
    const std::string a =
        torch_save_archive("F32", {}, std::string_view(reinterpret_cast<const char*>(&v), 4), "t");
    m.tensors.push_back({dcp_optim_state_key(name, "step"),
                         "F32",
                         {},
                         {{ChunkBox{{}, {}}, "__0_0.distcp", file.size(), a.size()}},
                         nullptr});
    file += a;
  }
  write_output_file(dir + "/__0_0.distcp", file, "t");
  write_output_file(dir + "/.metadata", dcp_metadata_pickle(m), "t");
  return dir;
}

TEST(DcpOptim, StepsAreReadAndMustAgree) {
  TempDir d;
  DcpReader same(write_steps(d.path() + "/a", {{"x", 7.0f}, {"y", 7.0f}}));
  EXPECT_EQ(read_dcp_adamw_step(same, {"x", "y"}), 7);
  EXPECT_EQ(dcp_step_archive(7).size(),
            torch_save_archive("F32", {}, std::string("\x00\x00\xe0\x40", 4), "t").size());
  DcpReader differ(write_steps(d.path() + "/b", {{"x", 7.0f}, {"y", 6.0f}}));
  EXPECT_NE(error_of([&] {
              read_dcp_adamw_step(differ, {"x", "y"});
            }).find("'state.y.step': is step 6 but 'state.x.step' is step 7"),
            std::string::npos);
  DcpReader frac(write_steps(d.path() + "/c", {{"x", 1.5f}}));
  EXPECT_NE(error_of([&] { read_dcp_adamw_step(frac, {"x"}); }).find("not a step count"),
            std::string::npos);
}

}  // namespace
}  // namespace fullshard
