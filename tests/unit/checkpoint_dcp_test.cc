// DCP's own format (NOTE [DCP's own format], NOTE [torch.save archives]): checkpoints PyTorch
// 2.15 wrote (tests/data/oracle/dcp, tools/oracle/dcp_checkpoints.py) read to the value, a
// torch.save archive written byte for byte as PyTorch writes it, any metadata and archive
// round trip, `export --dcp` reads back as the checkpoint's parameters, and damaged or foreign
// files are one-line InputErrors naming the file.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/checkpoint/dcp.h"
#include "core/checkpoint/export.h"
#include "core/checkpoint/pickle.h"
#include "core/checkpoint/safetensors.h"
#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"
#include "core/model/transformer.h"
#include "core/tensor/float_convert.h"
#include "tests/support/temp_dir.h"

namespace fullshard {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;

const std::string kOracle = std::string(FULLSHARD_SOURCE_DIR) + "/tests/data/oracle/dcp";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

std::vector<float> read_f32(DcpReader& r, const std::string& fqn, const ChunkBox& box) {
  std::vector<float> v(static_cast<size_t>(box_numel(box)));
  r.read_box(fqn, box, v.data(), v.size() * 4);
  return v;
}

TEST(DcpFromPyTorch, Fsdp2ChunksAndValues) {
  DcpReader r(kOracle + "/fsdp2");
  const DcpMetadata& m = r.metadata();
  ASSERT_EQ(m.tensors.size(), 3u);
  const DcpTensor* w = m.find("0.weight");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->dtype, "F32");
  EXPECT_EQ(w->shape, (Shape{5, 4}));
  ASSERT_EQ(w->chunks.size(), 2u);  // FSDP2's Shard(0) over 2 ranks: torch.chunk's 3 + 2 rows
  EXPECT_EQ(w->chunks[0].box, (ChunkBox{{0, 0}, {3, 4}}));
  EXPECT_EQ(w->chunks[1].box, (ChunkBox{{3, 0}, {2, 4}}));
  EXPECT_EQ(w->chunks[0].file, "__0_0.distcp");
  EXPECT_EQ(w->chunks[1].file, "__1_0.distcp");
  EXPECT_EQ(w->chunks[0].offset, 0u);
  EXPECT_EQ(m.find("1.weight")->chunks[1].box, (ChunkBox{{2, 0}, {1, 5}}));
  // element k of the i-th parameter is 1000 i + k
  const std::vector<std::pair<std::string, int>> params{
      {"0.weight", 0}, {"0.bias", 1}, {"1.weight", 2}};
  for (const auto& [fqn, i] : params) {
    const DcpTensor& t = *m.find(fqn);
    const auto all = read_f32(r, fqn, full_box(t.shape));
    for (size_t k = 0; k < all.size(); ++k) ASSERT_EQ(all[k], 1000.0f * i + k) << fqn;
  }
  // a box across both ranks' chunks: rows 2-4, columns 1-2
  const auto part = read_f32(r, "0.weight", {{2, 1}, {3, 2}});
  EXPECT_EQ(part, (std::vector<float>{9, 10, 13, 14, 17, 18}));
}

TEST(DcpFromPyTorch, Bf16F16AndABytesEntry) {
  DcpReader r(kOracle + "/plain");
  const DcpMetadata& m = r.metadata();
  EXPECT_EQ(m.non_tensors, (std::vector<std::string>{"step"}));
  ASSERT_EQ(m.find("w")->dtype, "BF16");
  ASSERT_EQ(m.find("h")->dtype, "F16");
  std::vector<uint16_t> w(6), h(4);
  r.read_box("w", full_box({2, 3}), w.data(), 12);
  r.read_box("h", full_box({4}), h.data(), 8);
  for (int k = 0; k < 6; ++k) EXPECT_EQ(bf16_to_float(w[k]), k + 0.5f);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(fp16_to_float(h[k]), k / 4.0f);
  EXPECT_THROW(r.read_box("step", full_box({1}), w.data(), 2), InputError);
}

TEST(DcpFromPyTorch, TorchSaveArchiveAsPyTorchWritesIt) {
  // PyTorch's archive of rank 0's chunk of 0.weight: [3, 4] float32 holding 0..11
  const std::string theirs = slurp(kOracle + "/fsdp2/__0_0.distcp").substr(0, 1577);
  std::vector<float> v(12);
  for (int k = 0; k < 12; ++k) v[k] = static_cast<float>(k);
  const std::string ours = torch_save_archive(
      "F32", {3, 4}, std::string_view(reinterpret_cast<const char*>(v.data()), 48), "t");
  // Every record up to the central directory is PyTorch's, byte for byte (PyTorch then adds
  // .data/serialization_id, which torch.load does not need).
  const size_t cd = ours.find("PK\x01\x02");
  ASSERT_NE(cd, std::string::npos);
  EXPECT_EQ(ours.substr(0, cd), theirs.substr(0, cd));
  const auto read_from = [](const std::string& s) {
    return [&s](uint64_t off, uint64_t n, void* dst) { std::memcpy(dst, s.data() + off, n); };
  };
  const TorchSavedTensor a = parse_torch_save(read_from(theirs), theirs.size(), "theirs");
  const TorchSavedTensor b = parse_torch_save(read_from(ours), ours.size(), "ours");
  EXPECT_EQ(a.data_offset, b.data_offset);
  EXPECT_EQ(a.shape, (Shape{3, 4}));
  EXPECT_EQ(a.data_offset % 64, 0u);
  EXPECT_EQ(theirs.substr(a.data_offset, 48), ours.substr(b.data_offset, 48));
}

RC_GTEST_PROP(TorchSaveProp, ArchivesRoundTripAndAnyCutIsAnInputError, ()) {
  const std::string dtype = *rc::gen::elementOf(std::vector<std::string>{"F32", "BF16", "F16"});
  const Shape shape =
      *rc::gen::container<Shape>(*rc::gen::inRange<size_t>(0, 4), rc::gen::inRange<int64_t>(0, 5));
  std::string data(static_cast<size_t>(numel(shape)) * *safetensors_dtype_size(dtype), '\0');
  for (auto& c : data) c = static_cast<char>(*rc::gen::arbitrary<uint8_t>());
  const std::string a = torch_save_archive(dtype, shape, data, "t");
  auto reader = [&](uint64_t off, uint64_t n, void* dst) {
    RC_ASSERT(off + n <= a.size());
    std::memcpy(dst, a.data() + off, n);
  };
  const TorchSavedTensor t = parse_torch_save(reader, a.size(), "t");
  RC_ASSERT(t.dtype == dtype);
  RC_ASSERT(t.shape == shape);
  RC_ASSERT(t.data_offset % 64 == 0);
  RC_ASSERT(a.substr(t.data_offset, t.nbytes) == data);
  const uint64_t cut = *rc::gen::inRange<uint64_t>(0, a.size());
  const std::string b = a.substr(0, cut);
  auto short_reader = [&](uint64_t off, uint64_t n, void* dst) {
    std::memcpy(dst, b.data() + off, n);
  };
  RC_ASSERT_THROWS_AS(parse_torch_save(short_reader, b.size(), "t"), InputError);
}

RC_GTEST_PROP(DcpMetadataProp, RoundTrips, ()) {
  DcpMetadata m;
  const int n = *rc::gen::inRange(1, 5);
  for (int i = 0; i < n; ++i) {
    DcpTensor t{"layers." + std::to_string(i) + ".w",
                *rc::gen::elementOf(std::vector<std::string>{"F32", "BF16", "F16"}),
                {*rc::gen::inRange<int64_t>(1, 9), *rc::gen::inRange<int64_t>(1, 4)},
                {}};
    const int world = *rc::gen::inRange(1, 5);
    for (int r = 0; r < world; ++r) {
      const int64_t rows = shard_rows(t.shape[0], world, r);
      if (rows == 0) continue;
      t.chunks.push_back({{{shard_row_offset(t.shape[0], world, r), 0}, {rows, t.shape[1]}},
                          "__" + std::to_string(r) + "_0.distcp",
                          *rc::gen::inRange<uint64_t>(0, uint64_t{1} << 40),
                          *rc::gen::inRange<uint64_t>(1, 100000)});
    }
    m.tensors.push_back(t);
  }
  const DcpMetadata back = dcp_metadata_from_pickle(dcp_metadata_pickle(m), "t");
  RC_ASSERT(back.tensors.size() == m.tensors.size());
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const DcpTensor &a = m.tensors[i], &b = back.tensors[i];
    RC_ASSERT(a.fqn == b.fqn && a.dtype == b.dtype && a.shape == b.shape);
    RC_ASSERT(a.chunks.size() == b.chunks.size());
    for (size_t c = 0; c < a.chunks.size(); ++c)
      RC_ASSERT(a.chunks[c].box == b.chunks[c].box && a.chunks[c].file == b.chunks[c].file &&
                a.chunks[c].offset == b.chunks[c].offset &&
                a.chunks[c].length == b.chunks[c].length);
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(DcpMetadata, RefusesPathsOutsideTheFolderAndGapsInOneLine) {
  DcpMetadata m;
  m.tensors.push_back({"w", "F32", {4}, {{{{0}, {4}}, "../x.distcp", 0, 10}}});
  EXPECT_NE(
      error_of([&] {
        dcp_metadata_from_pickle(dcp_metadata_pickle(m), "ck/.metadata");
      }).find("ck/.metadata: tensor 'w': relative_path '../x.distcp' is not a file in the folder"),
      std::string::npos);
  m.tensors[0].chunks[0] = {{{0}, {3}}, "__0_0.distcp", 0, 10};  // row 3 missing
  EXPECT_NE(error_of([&] {
              dcp_metadata_from_pickle(dcp_metadata_pickle(m), "ck/.metadata");
            }).find("ck/.metadata: tensor 'w'"),
            std::string::npos);
}

TEST(DcpFromPyTorch, TruncatedOrMisplacedFilesAreOneLineErrors) {
  TempDir d;
  fs::copy(kOracle + "/fsdp2", d.path() + "/ck");
  fs::resize_file(d.path() + "/ck/__1_0.distcp", 4000);  // cuts 1.weight's archive short
  DcpReader r(d.path() + "/ck");
  EXPECT_EQ(read_f32(r, "0.weight", full_box({5, 4}))[19], 19.0f);  // earlier chunks still read
  const std::string e = error_of([&] { read_f32(r, "1.weight", full_box({3, 5})); });
  EXPECT_NE(e.find("__1_0.distcp"), std::string::npos) << e;
  // a .distcp whose archives do not match the .metadata (the files of another checkpoint)
  fs::copy_file(kOracle + "/fsdp2/__1_0.distcp", d.path() + "/ck/__0_0.distcp",
                fs::copy_options::overwrite_existing);
  fs::copy_file(kOracle + "/fsdp2/__0_0.distcp", d.path() + "/ck/__1_0.distcp",
                fs::copy_options::overwrite_existing);
  DcpReader swapped(d.path() + "/ck");
  EXPECT_NE(error_of([&] {
              read_f32(swapped, "0.weight", full_box({5, 4}));
            }).find("holds a F32 [2, 4] tensor, but .metadata says F32 [3, 4]"),
            std::string::npos);
}

// A committed GPT-2 checkpoint saved by 3 ranks (uneven rows); element k of the i-th parameter
// is 1000 i + k. Returns fqn -> global values.
std::map<std::string, std::vector<float>> save_gpt2(const std::string& root) {
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
  const int world = 3;
  begin_checkpoint(root, 1, "test");
  CheckpointMetadata m;
  m.arch = "gpt2";
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
  }
  for (int r = 0; r < world; ++r) {
    m.files.push_back({shard_file_name(r, world), 0});
    std::vector<SafetensorsTensor> out;
    for (const auto& [fqn, shape] : params)
      out.push_back({"param/" + fqn, "F32", sharded_shape(shape, world, r),
                     values[fqn].data() + shard_row_offset(shape[0], world, r) * row_numel(shape)});
    write_safetensors((fs::path(root) / step_folder_name(1) / shard_file_name(r, world)).string(),
                      out, {}, "test");
  }
  commit_checkpoint(root, m, "test");
  return values;
}

TEST(DcpExport, ReadsBackAsTheCheckpointsParametersWithConv1DTransposes) {
  TempDir d;
  const auto values = save_gpt2(d.path() + "/ck");
  CheckpointReader reader(resolve_checkpoint(d.path() + "/ck", "test"));
  DcpExportOptions o;
  o.out = d.path() + "/dcp";
  const DcpExportResult res = export_dcp(reader, o);
  EXPECT_EQ(res.tensors, values.size());
  EXPECT_EQ(res.files.size(), 4u);  // __0_0 .. __2_0, .metadata
  DcpReader r(o.out);
  size_t chunks = 0;
  for (const auto& [fqn, v] : values) {
    const HfTensorName n = export_name("gpt2", fqn, true);
    const DcpTensor* t = r.metadata().find(n.name);
    ASSERT_TRUE(t) << n.name;
    chunks += t->chunks.size();
    const auto got = read_f32(r, n.name, full_box(t->shape));
    if (!n.transpose) {
      EXPECT_EQ(got, v) << fqn;
      continue;
    }
    const int64_t rows = t->shape[1], cols = t->shape[0];  // ours [out, in]; stored [in, out]
    for (int64_t a = 0; a < rows; ++a)
      for (int64_t b = 0; b < cols; ++b)
        ASSERT_EQ(got[static_cast<size_t>(b * rows + a)], v[static_cast<size_t>(a * cols + b)])
            << fqn;
    EXPECT_EQ(t->chunks[0].box.lengths[0],
              t->shape[0]);  // a transposed piece: all rows, some columns
  }
  EXPECT_EQ(chunks, res.chunks);
  const DcpTensor* wpe = r.metadata().find("transformer.wpe.weight");  // [5, 4] over 3: 2 + 2 + 1
  ASSERT_EQ(wpe->chunks.size(), 3u);
  EXPECT_EQ(wpe->chunks[2].box, (ChunkBox{{4, 0}, {1, 4}}));
  EXPECT_EQ(wpe->chunks[2].file, "__2_0.distcp");
}

}  // namespace
}  // namespace fullshard
