// A sharded checkpoint on disk (NOTE [Checkpoint commit], NOTE [Reshard on load]): ranks
// write their pieces, rank 0 commits; a reader of another world size gets exactly its rows;
// unfinished saves are skipped; damaged files and metadata are one-line InputErrors naming
// the file and the tensor.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/checkpoint/checkpoint_dir.h"
#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"
#include "tests/support/temp_dir.h"
#include "tests/support/input_error.h"

namespace fullshard {
namespace {
namespace fs = std::filesystem;

using testing::TempDir;

using testing::input_error_of;

// A global tensor whose element k is float(k + salt).
std::vector<float> global(const Shape& s, float salt) {
  std::vector<float> v(static_cast<size_t>(numel(s)));
  for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(k) + salt;
  return v;
}

struct Model {
  std::vector<std::pair<std::string, Shape>> tensors;
};

// Saves `m` as `world` ranks would: each writes its pieces, then rank 0 commits.
void save(const std::string& root, const Model& m, int world, int64_t step) {
  begin_checkpoint(root, step, "--checkpoint-dir");
  CheckpointMetadata meta;
  meta.step = step;
  meta.next_step = step;
  meta.world_size = world;
  meta.shard = world;
  for (int r = 0; r < world; ++r) meta.files.push_back({shard_file_name(r, world), 0});
  for (const auto& [name, shape] : m.tensors)
    meta.tensors.push_back(sharded_tensor(name, "F32", shape, world));
  for (int r = 0; r < world; ++r) {
    std::vector<std::vector<float>> keep;
    std::vector<SafetensorsTensor> out;
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      const auto& [name, shape] = m.tensors[i];
      const auto g = global(shape, static_cast<float>(step * 1000 + i));
      const int64_t rn = row_numel(shape);
      const int64_t off = shard_row_offset(shape[0], world, r) * rn;
      keep.emplace_back(g.begin() + off, g.begin() + off + shard_rows(shape[0], world, r) * rn);
      out.push_back({name, "F32", sharded_shape(shape, world, r), keep.back().data()});
    }
    write_safetensors(
        (fs::path(root) / step_folder_name(step) / shard_file_name(r, world)).string(), out, {},
        "--checkpoint-dir");
  }
  commit_checkpoint(root, meta, "--checkpoint-dir");
}

// Loads every tensor for every rank of `world` and checks each element against the global.
void check_load(const std::string& folder, const Model& m, int world, int64_t step) {
  CheckpointReader r(folder);
  r.verify();
  EXPECT_EQ(r.metadata().step, step);
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const auto& [name, shape] = m.tensors[i];
    const auto g = global(shape, static_cast<float>(step * 1000 + i));
    for (int rank = 0; rank < world; ++rank) {
      const int64_t rn = row_numel(shape);
      std::vector<float> shard(static_cast<size_t>(shard_rows(shape[0], world, rank) * rn));
      r.read_shard(name, world, rank, shard.data(), shard.size() * 4);
      const int64_t off = shard_row_offset(shape[0], world, rank) * rn;
      for (size_t k = 0; k < shard.size(); ++k)
        ASSERT_EQ(shard[k], g[static_cast<size_t>(off) + k]) << name;
    }
  }
}

const Model kModel{{{"param/embed", {17, 3}},
                    {"param/norm", {5}},
                    {"exp_avg/embed", {17, 3}},
                    {"param/empty", {0, 2}}}};

TEST(CheckpointDir, SaveOnTwoRanksLoadOnThreeAndOne) {
  TempDir d;
  save(d.path(), kModel, 2, 3);
  const std::string folder = resolve_checkpoint(d.path(), "--resume");
  EXPECT_EQ(fs::path(folder).filename(), "step-00000003");
  check_load(folder, kModel, 3, 3);
  check_load(folder, kModel, 1, 3);
  check_load(folder, kModel, 2, 3);
  std::ifstream latest(fs::path(d.path()) / "latest");
  std::string line;
  std::getline(latest, line);
  EXPECT_EQ(line, "step-00000003");
}

TEST(CheckpointDir, LatestIsTheHighestCommittedStep) {
  TempDir d;
  save(d.path(), kModel, 2, 3);
  save(d.path(), kModel, 2, 6);
  EXPECT_EQ(fs::path(resolve_checkpoint(d.path(), "--resume")).filename(), "step-00000006");
  // A save of step 9 that died before its commit: files but no metadata.json.
  begin_checkpoint(d.path(), 9, "--checkpoint-dir");
  std::ofstream(fs::path(d.path()) / "step-00000009" / "shard-00000-of-00002.safetensors")
      << "partial";
  EXPECT_EQ(fs::path(resolve_checkpoint(d.path(), "--resume")).filename(), "step-00000006");
  // Re-saving step 6 uncommits it first: the resolver falls back to step 3 meanwhile.
  begin_checkpoint(d.path(), 6, "--checkpoint-dir");
  EXPECT_EQ(fs::path(resolve_checkpoint(d.path(), "--resume")).filename(), "step-00000003");
  EXPECT_EQ(resolve_checkpoint((fs::path(d.path()) / "step-00000003").string(), "--resume"),
            (fs::path(d.path()) / "step-00000003").string());
  EXPECT_NE(input_error_of([&] {
              resolve_checkpoint(d.path() + "/nope", "--resume");
            }).find("--resume: '"),
            std::string::npos);
  TempDir empty;
  EXPECT_NE(input_error_of([&] {
              resolve_checkpoint(empty.path(), "--resume");
            }).find("no committed checkpoint"),
            std::string::npos);
}

// The step folders (committed or not) and .deleting-* folders under `root`, sorted.
std::vector<std::string> entries(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// NOTE [Checkpoint retention] (core/checkpoint/checkpoint_dir.h): the newest K committed
// checkpoints stay; older ones, remnants of killed saves older than the oldest kept one, and
// leftovers of an interrupted prune go; a newer unfinished save is never touched.
TEST(CheckpointDir, KeepLastDeletesOnlyOlderCheckpoints) {
  TempDir d;
  for (int64_t step : {2, 4, 6}) save(d.path(), kModel, 2, step);
  EXPECT_TRUE(prune_checkpoints(d.path(), 0, "--keep-last").empty());  // 0: keep all
  EXPECT_EQ(entries(d.path()).size(), 3u);
  // A remnant of a killed save of step 3, a newer save of step 8 in progress, and a folder an
  // interrupted prune had renamed.
  begin_checkpoint(d.path(), 3, "--checkpoint-dir");
  begin_checkpoint(d.path(), 8, "--checkpoint-dir");
  std::ofstream(fs::path(d.path()) / "step-00000008" / "shard-00000-of-00002.safetensors")
      << "being written";
  fs::create_directories(fs::path(d.path()) / ".deleting-step-00000001" / "x");
  const auto deleted = prune_checkpoints(d.path(), 2, "--keep-last");
  EXPECT_EQ(deleted, (std::vector<std::string>{"step-00000003", "step-00000002"}));
  EXPECT_EQ(entries(d.path()),
            (std::vector<std::string>{"step-00000004", "step-00000006", "step-00000008"}));
  EXPECT_TRUE(
      fs::exists(fs::path(d.path()) / "step-00000008" / "shard-00000-of-00002.safetensors"));
  check_load((fs::path(d.path()) / "step-00000004").string(), kModel, 2, 4);
  check_load(resolve_checkpoint(d.path(), "--resume"), kModel, 3, 6);
  // keep 1: only the newest committed one is left (and the save in progress).
  save(d.path(), kModel, 2, 8);
  prune_checkpoints(d.path(), 1, "--keep-last");
  EXPECT_EQ(entries(d.path()), (std::vector<std::string>{"step-00000008"}));
  check_load(resolve_checkpoint(d.path(), "--resume"), kModel, 2, 8);
  // A folder renamed for deletion is never loaded, even when the prune stopped before removing it.
  save(d.path(), kModel, 2, 10);
  fs::rename(fs::path(d.path()) / "step-00000010", fs::path(d.path()) / ".deleting-step-00000010");
  EXPECT_EQ(fs::path(resolve_checkpoint(d.path(), "--resume")).filename(), "step-00000008");
}

// Re-saving a step empties the folder first: no file of the earlier save survives into the new one.
TEST(CheckpointDir, BeginRemovesTheEarlierSaveOfTheStep) {
  TempDir d;
  save(d.path(), kModel, 3, 4);
  begin_checkpoint(d.path(), 4, "--checkpoint-dir");
  EXPECT_TRUE(fs::is_empty(fs::path(d.path()) / "step-00000004"));
}

TEST(CheckpointDir, DamagedFilesNameTheFileAndTensor) {
  TempDir d;
  save(d.path(), kModel, 2, 3);
  const fs::path folder = fs::path(d.path()) / "step-00000003";
  const fs::path f1 = folder / "shard-00001-of-00002.safetensors";
  const auto size = fs::file_size(f1);
  const fs::path meta = folder / "metadata.json";
  auto rewrite = [&](auto&& edit) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(meta));
    edit(j);
    std::ofstream(meta) << j.dump();
  };
  // Truncated rank file.
  fs::resize_file(f1, size - 4);
  {
    CheckpointReader r(folder.string());
    const std::string msg = input_error_of([&] { r.verify(); });
    EXPECT_NE(msg.find(f1.string()), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
  // A rank file from another model: same size, a tensor of another shape.
  const Model other{{{"param/embed", {17, 3}},
                     {"param/norm", {5}},
                     {"exp_avg/embed", {3, 17}},
                     {"param/empty", {0, 2}}}};
  TempDir d2;
  save(d2.path(), other, 2, 3);
  fs::copy_file(fs::path(d2.path()) / "step-00000003" / f1.filename(), f1,
                fs::copy_options::overwrite_existing);
  {
    CheckpointReader r(folder.string());
    EXPECT_NE(input_error_of([&] { r.verify(); }).find("metadata.json says"), std::string::npos);
  }
  rewrite([&](nlohmann::json& j) {
    j["files"][1]["bytes"] = fs::file_size(f1);
  });  // same size: the header decides
  {
    CheckpointReader r(folder.string());
    const std::string msg = input_error_of([&] { r.verify(); });
    EXPECT_NE(msg.find("tensor 'exp_avg/embed'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(f1.string()), std::string::npos) << msg;
  }
  // Damaged metadata: a gap in a tensor's chunks, an unknown field, not JSON.
  rewrite([](nlohmann::json& j) {
    j["tensors"][0]["chunks"][1]["offsets"][0] = 10;
    j["tensors"][0]["chunks"][1]["lengths"][0] = 7;
  });
  std::string msg = input_error_of([&] { CheckpointReader r(folder.string()); });
  EXPECT_NE(msg.find(meta.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("'param/embed'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gap after row 9"), std::string::npos) << msg;
  rewrite([](nlohmann::json& j) {
    j["tensors"][0]["chunks"][1]["offsets"][0] = 9;
    j["tensors"][0]["chunks"][1]["lengths"][0] = 8;
    j["mesh"]["shard"] = 3;
  });
  EXPECT_NE(input_error_of([&] { CheckpointReader r(folder.string()); }).find("not world_size 2"),
            std::string::npos);
  std::ofstream(meta) << "{\"format\": ";
  EXPECT_NE(input_error_of([&] { CheckpointReader r(folder.string()); }).find(meta.string()),
            std::string::npos);
}

RC_GTEST_PROP(CheckpointDirProp, AnySaveWorldLoadsOnAnyWorld, ()) {
  TempDir d;
  const int save_world = *rc::gen::inRange(1, 8);
  const int load_world = *rc::gen::inRange(1, 8);
  Model m;
  const int n = *rc::gen::inRange(1, 4);
  for (int i = 0; i < n; ++i)
    m.tensors.push_back({"param/t" + std::to_string(i),
                         {*rc::gen::inRange<int64_t>(0, 20), *rc::gen::inRange<int64_t>(1, 4)}});
  save(d.path(), m, save_world, 1);
  check_load(resolve_checkpoint(d.path(), "--resume"), m, load_world, 1);
  RC_ASSERT(!::testing::Test::HasFailure());
}

}  // namespace
}  // namespace fullshard
