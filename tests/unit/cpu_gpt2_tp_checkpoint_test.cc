// Checkpoints of tensor-parallel GPT-2 runs on the CPU backend (ranks as threads over Gloo).
// GPT-2's fused c_attn is split over tp per q, k, v block, so a rank's piece of it is several
// boxes of the global tensor (NOTE [Multi-box pieces of fused weights]): a FSDP x tp run
// resumes bit-identically; its checkpoint loads onto other meshes (FSDP 3, 1 rank, another
// FSDP x tp) and continues as unsharded training does; its export is byte for byte the export
// of the same parameters saved without tp.
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/checkpoint/checkpoint_dir.h"
#include "core/checkpoint/export.h"
#include "core/checkpoint/piece_layout.h"
#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"
#include "tests/support/checkpoint_support.h"
#include "tests/support/cpu_support.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"
#include "tests/support/temp_dir.h"

namespace fullshard {
namespace {
using namespace fullshard::testing;
using nlohmann::json;
namespace fs = std::filesystem;

// A GPT-2 (dim 8: c_attn [24, 8], blocks of 8 rows) that splits 1 or 2 ways over tp. `mesh`:
// {shard}, {shard, tp} or {replicate, shard, tp}; `global_batch` sequences per step over the
// data-parallel ranks (NOTE [fp32 tolerance]).
json scenario(std::vector<int> mesh, int global_batch, int steps = 6, double lr = 1e-3) {
  return tp_checkpoint_scenario(mesh, global_batch,
                                {{"arch", "gpt2"},
                                 {"name", "gpt2ckpt"},
                                 {"vocab_size", 256},
                                 {"dim", 8},
                                 {"n_layers", 2},
                                 {"n_heads", 4},
                                 {"ffn_dim", 16},
                                 {"max_seq_len", 16}},
                                steps, lr, 11);
}

// Every parameter of the checkpoint in `dir`, read whole (one rank of FSDP 1), equals `run`'s
// parameters byte for byte.
void expect_checkpoint_holds(const std::string& dir, const RealRun& run) {
  CheckpointReader reader(resolve_checkpoint(dir, "--resume"));
  reader.verify();
  for (const auto& [fqn, values] : run.params) {
    std::vector<float> full(values.size());
    reader.read_shard("param/" + fqn, 1, 0, full.data(), full.size() * 4);
    EXPECT_EQ(std::memcmp(full.data(), values.data(), full.size() * 4), 0) << fqn;
  }
}

// Every blocked Shard(0) layout (3 blocks, tp 1-4, FSDP 1-5, 1-3 block rows per tp rank, so
// uneven and empty FSDP pieces too): each rank's boxes are its local rows' global rows in
// order (local row j of block b = global row b*R/3 + t*L + j % L), at most 3 of them, and the
// stored boxes of all ranks tile the tensor.
TEST(CpuGpt2TpCheckpoint, PieceBoxesAreTheLocalRowsInOrder) {
  for (int T = 1; T <= 4; ++T)
    for (int S = 1; S <= 5; ++S)
      for (int64_t L = 1; L <= 3; ++L) {
        const Shape global = {3 * T * L, 2};
        PieceLayout l;
        l.tp_dim = 0;
        l.tp_degree = T;
        l.shard_world = S;
        l.tp_blocks = 3;
        const std::string where =
            "T " + std::to_string(T) + " S " + std::to_string(S) + " L " + std::to_string(L);
        std::vector<ChunkBox> all;
        for (const auto& p : stored_pieces(global, l)) all.push_back(p.box);
        EXPECT_NO_THROW(validate_boxes(global, all, where)) << where;
        for (int t = 0; t < T; ++t)
          for (int s = 0; s < S; ++s) {
            const auto boxes = piece_boxes(global, l, t, s);
            EXPECT_LE(boxes.size(), 3u) << where;
            std::vector<int64_t> rows;
            for (const auto& b : boxes) {
              EXPECT_EQ(b.lengths[1], 2) << where;
              for (int64_t r = 0; r < b.lengths[0]; ++r) rows.push_back(b.offsets[0] + r);
            }
            const int64_t local = 3 * L, first = shard_row_offset(local, S, s),
                          n = shard_rows(local, S, s);
            ASSERT_EQ(static_cast<int64_t>(rows.size()), n) << where;
            for (int64_t j = 0; j < n; ++j)
              EXPECT_EQ(rows[j], (first + j) / L * T * L + t * L + (first + j) % L)
                  << where << " row " << j;
          }
      }
}

// dp_shard 2 x tp 2, dp_shard 1 x tp 2 (a piece of all three blocks) and HSDP 2 x 1 x tp 2:
// 3 steps, save, resume for 3 more == 6 straight, every rank's loss and every parameter.
TEST(CpuGpt2TpCheckpoint, ResumeContinuesBitIdentically) {
  for (const auto& mesh : std::vector<std::vector<int>>{{2, 2}, {1, 2}, {2, 1, 2}}) {
    TempDir d;
    const RealRun first =
        expect_resume_continues_bit_identically(parse_scenario(scenario(mesh, 4)), d.path(),
                                                "mesh of " + std::to_string(mesh.size()) + " dims");
    expect_checkpoint_holds(d.path(), first);
  }
}

// What a dp_shard 2 x tp 2 save writes for c_attn [24, 8] (tp-local [12, 8], blocks of 4 local
// rows, FSDP rows 0-5 and 6-11): each rank's piece is two row runs of the global tensor, one
// chunk each, stored back to back in the rank's one entry of the tensor.
TEST(CpuGpt2TpCheckpoint, MetadataListsOneChunkPerRowRun) {
  TempDir d;
  run_real(parse_scenario(scenario({2, 2}, 4)), 1, saving(d.path(), 1));
  const std::string folder = resolve_checkpoint(d.path(), "--resume");
  CheckpointReader reader(folder);
  reader.verify();
  const CheckpointTensor* w = reader.metadata().find("exp_avg/layers.0.attn.c_attn.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (Shape{24, 8}));
  // (shard s, tp t) is file s * 2 + t: (0, 0) holds q rows 0-3 and k rows 8-9, (1, 0) k rows
  // 10-11 and v rows 16-19, (0, 1) rows 4-7 and 12-13, (1, 1) rows 14-15 and 20-23.
  const std::vector<std::pair<int, ChunkBox>> want = {
      {0, {{0, 0}, {4, 8}}},  {1, {{4, 0}, {4, 8}}},  {0, {{8, 0}, {2, 8}}},
      {2, {{10, 0}, {2, 8}}}, {1, {{12, 0}, {2, 8}}}, {3, {{14, 0}, {2, 8}}},
      {2, {{16, 0}, {4, 8}}}, {3, {{20, 0}, {4, 8}}}};
  ASSERT_EQ(w->chunks.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(w->chunks[i].file, shard_file_name(want[i].first, 4)) << i;
    EXPECT_EQ(w->chunks[i].box, want[i].second) << i << ": " << box_str(w->chunks[i].box);
  }
  const CheckpointTensor* b =
      reader.metadata().find("param/layers.1.attn.c_attn.bias");  // [24]: 6 per rank
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->chunks.size(), 8u);
  SafetensorsReader f((fs::path(folder) / shard_file_name(0, 4)).string());
  EXPECT_EQ(f.entry("exp_avg/layers.0.attn.c_attn.weight").shape, (Shape{6, 8}));
  EXPECT_EQ(f.entry("param/layers.1.attn.c_attn.bias").shape, (Shape{6}));
  // An entry that is not its chunks stacked is named as not belonging to the checkpoint.
  const fs::path meta = fs::path(folder) / "metadata.json";
  json j;
  std::ifstream(meta) >> j;
  for (auto& t : j["tensors"])
    if (t["name"] ==
        "param/layers.1.attn.c_attn.bias") {  // still a tiling: file 0's chunks now stack to 7 rows
      t["chunks"][0]["lengths"][0] = 5;
      t["chunks"][1]["offsets"][0] = 5;
      t["chunks"][1]["lengths"][0] = 3;
    }
  std::ofstream(meta) << j.dump();
  const std::string msg = input_error_of([&] { CheckpointReader(folder).verify(); });
  EXPECT_NE(msg.find("tensor 'param/layers.1.attn.c_attn.bias'"), std::string::npos) << msg;
}

// Saved by dp_shard 2 x tp 2 (and by FSDP 4), loaded by FSDP 3, 1 rank, dp_shard 3 x tp 2 and
// dp_shard 1 x tp 2 with the same global batch: each matches one unsharded rank trained
// straight through. Loaded on the saving mesh for 0 steps, the parameters are the saved ones.
TEST(CpuGpt2TpCheckpoint, ReshardOnLoadMatchesUnsharded) {
  const RealRun ref = run_real(parse_scenario(scenario({1}, 12)), 6);
  for (const auto& saved : std::vector<std::vector<int>>{{2, 2}, {4}}) {
    TempDir d;
    const RealRun first = run_real(parse_scenario(scenario(saved, 12)), 3, saving(d.path(), 3));
    expect_checkpoint_holds(d.path(), first);
    std::vector<std::vector<int>> loads = {{3}, {1}, {3, 2}, {1, 2}};
    if (saved.size() == 1) loads = {{2, 2}};
    for (const auto& mesh : loads) {
      const RealRun resumed = run_real(parse_scenario(scenario(mesh, 12)), 6, resuming(d.path()));
      ASSERT_EQ(resumed.mean_loss.size(), 3u);  // steps 3, 4, 5
      std::string where;
      EXPECT_LE(max_violation(resumed, ref, 1e-5, 1e-3, &where), 1.0)
          << where << " (saved on " << saved.size() << " dims, loaded on " << mesh.size() << ")";
      for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(resumed.mean_loss[k], ref.mean_loss[3 + k], 1e-4);
    }
    for (const auto& mesh : std::vector<std::vector<int>>{{3}, {1}, {3, 2}}) {
      const RealRun loaded = run_real(parse_scenario(scenario(mesh, 12)), 3, resuming(d.path()));
      EXPECT_TRUE(loaded.mean_loss.empty());
      expect_bit_identical(loaded, first);
    }
  }
}

// The Hugging Face export of a dp_shard 2 x tp 2 checkpoint is byte for byte the export of the
// same parameters saved by one rank without tp (loaded from it, one step at lr 0), and each of
// its tensors is the tp run's parameter (Conv1D weights transposed).
TEST(CpuGpt2TpCheckpoint, ExportEqualsTheExportWithoutTp) {
  TempDir d, one;
  const RealRun trained = run_real(parse_scenario(scenario({2, 2}, 4, 3)), 2, saving(d.path(), 2));
  CheckpointReader reader(resolve_checkpoint(d.path(), "--resume"));
  ExportOptions eo;
  eo.out = d.path() + "/model.safetensors";
  export_safetensors(reader, eo);
  const RealRun same = run_real(parse_scenario(scenario({1}, 4, 3, 0.0)), 3, [&] {
    runner::RankOptions o = saving(one.path(), 3);
    o.resume_from = resolve_checkpoint(d.path(), "--resume");
    return o;
  }());
  expect_bit_identical(same, trained);  // lr 0: the step left the parameters as loaded
  CheckpointReader one_reader(resolve_checkpoint(one.path(), "--resume"));
  EXPECT_EQ(one_reader.metadata().tp, 1);
  ExportOptions oo;
  oo.out = one.path() + "/model.safetensors";
  export_safetensors(one_reader, oo);
  const std::string a = file_bytes(eo.out), b = file_bytes(oo.out);
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "exports differ: " << a.size() << " and " << b.size() << " bytes";
  SafetensorsReader st(eo.out);
  for (const auto& [fqn, values] : trained.params) {
    const auto name = export_name("gpt2", fqn, true);
    const auto bytes = st.read_all(name.name);
    ASSERT_EQ(bytes.size(), values.size() * 4) << name.name;
    std::vector<float> v(values.size());
    std::memcpy(v.data(), bytes.data(), bytes.size());
    const auto& e = st.entry(name.name);
    for (size_t i = 0; i < v.size(); ++i) {
      const size_t src = name.transpose ? (i % e.shape[1]) * e.shape[0] + i / e.shape[1] : i;
      ASSERT_EQ(std::memcmp(&v[i], &values[src], 4), 0) << name.name << " element " << i;
    }
  }
}

}  // namespace
}  // namespace fullshard
