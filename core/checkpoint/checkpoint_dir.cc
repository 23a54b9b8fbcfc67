#include "core/checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/common/error.h"
#include "core/common/input_file.h"
#include "core/common/json_file.h"
#include "core/common/output_file.h"

namespace fullshard {
namespace fs = std::filesystem;
namespace {

// Makes a rename inside `folder` durable (the rename itself is atomic without it).
void fsync_folder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// The step of a folder called "step-NNNNNNNN", or -1.
int64_t step_of(const std::string& name) {
  if (name.size() != 13 || name.rfind("step-", 0) != 0) return -1;
  int64_t v = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::string step_folder_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string shard_file_name(int shard_rank, int shard_world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard-%05d-of-%05d.safetensors", shard_rank, shard_world);
  return buf;
}

std::string begin_checkpoint(const std::string& root, int64_t step, const std::string& flag) {
  const fs::path folder = fs::path(root) / step_folder_name(step);
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec || !fs::is_directory(folder))
    throw InputError(flag, "cannot create '" + folder.string() + "': " + ec.message(),
                     "give a writable folder");
  fs::remove(folder / kMetadataFile, ec);
  if (ec)
    throw InputError(
        flag, "cannot remove '" + (folder / kMetadataFile).string() + "': " + ec.message(), "");
  fsync_folder(folder.string());
  // Then the rest of the earlier save (its shard and temporary files): a file in the folder
  // is then always one of this save (NOTE [Asynchronous save] relies on it).
  for (const auto& e : fs::directory_iterator(folder, ec)) fs::remove_all(e.path(), ec);
  if (ec)
    throw InputError(flag, "cannot empty '" + folder.string() + "': " + ec.message(),
                     "check the folder's permissions");
  return folder.string();
}

void commit_checkpoint(const std::string& root, CheckpointMetadata m, const std::string& flag) {
  const fs::path folder = fs::path(root) / step_folder_name(m.step);
  for (auto& f : m.files) {
    std::error_code ec;
    const auto size = fs::file_size(folder / f.name, ec);
    if (ec)
      throw InputError(
          flag, "rank file '" + (folder / f.name).string() + "' is missing: " + ec.message(), "");
    f.bytes = size;
  }
  write_output_file((folder / kMetadataFile).string(), metadata_to_json(m).dump(1) + "\n", flag);
  fsync_folder(folder.string());
  write_output_file((fs::path(root) / kLatestFile).string(), step_folder_name(m.step) + "\n", flag);
  fsync_folder(root);
}

std::vector<std::string> prune_checkpoints(const std::string& root, int keep_last,
                                           const std::string& flag) {
  std::vector<std::string> deleted;
  if (keep_last <= 0) return deleted;
  std::error_code ec;
  std::vector<std::pair<int64_t, bool>> steps;  // (step, committed)
  std::vector<fs::path> leftovers;              // .deleting-* of an interrupted prune
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kDeletingPrefix, 0) == 0) leftovers.push_back(e.path());
    const int64_t s = step_of(name);
    if (s >= 0 && e.is_directory(ec))
      steps.emplace_back(s, fs::is_regular_file(e.path() / kMetadataFile, ec));
  }
  if (ec)
    throw InputError(flag, "cannot list '" + root + "': " + ec.message(), "give a readable folder");
  std::sort(steps.rbegin(), steps.rend());
  int kept = 0;
  std::vector<int64_t> doomed;
  for (const auto& [s, committed] : steps) {
    if (committed && kept < keep_last) {
      ++kept;
    } else if (kept == keep_last) {  // older than the oldest kept: committed or a remnant
      doomed.push_back(s);
    }
  }
  for (int64_t s : doomed) {
    const fs::path from = fs::path(root) / step_folder_name(s);
    const fs::path to = fs::path(root) / (kDeletingPrefix + step_folder_name(s));
    fs::remove_all(to, ec);  // an earlier interrupted deletion of the same step
    fs::rename(from, to, ec);
    if (ec)
      throw InputError(flag, "cannot rename '" + from.string() + "' for deletion: " + ec.message(),
                       "check the folder's permissions");
    leftovers.push_back(to);
    deleted.push_back(step_folder_name(s));
  }
  if (!doomed.empty()) fsync_folder(root);  // the renames are durable before anything is removed
  for (const auto& p : leftovers) {
    fs::remove_all(p, ec);
    if (ec)
      throw InputError(flag, "cannot remove '" + p.string() + "': " + ec.message(),
                       "check the folder's permissions");
  }
  return deleted;
}

std::string resolve_checkpoint(const std::string& path, const std::string& flag) {
  std::error_code ec;
  if (fs::is_regular_file(fs::path(path) / kMetadataFile, ec)) return path;
  if (!fs::is_directory(path, ec))
    throw InputError(flag, "'" + path + "' is not a folder",
                     "give a --checkpoint-dir folder or one of its step-N folders");
  int64_t best = -1;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const int64_t s = step_of(e.path().filename().string());
    if (s > best && fs::is_regular_file(e.path() / kMetadataFile, ec)) best = s;
  }
  if (best < 0)
    throw InputError(
        flag, "'" + path + "' holds no committed checkpoint (no step-N/" + kMetadataFile + ")",
        "train with --checkpoint-dir first, or give the folder it wrote");
  return (fs::path(path) / step_folder_name(best)).string();
}

CheckpointReader::CheckpointReader(std::string folder) : folder_(std::move(folder)) {
  const std::string path = (fs::path(folder_) / kMetadataFile).string();
  meta_ = metadata_from_json(read_json_input(path, "a checkpoint's metadata.json"), path);
}

SafetensorsReader& CheckpointReader::file(const std::string& name) {
  auto& r = files_[name];
  if (!r) {
    const std::string path = (fs::path(folder_) / name).string();
    r = std::make_unique<SafetensorsReader>(path);
    uint64_t expect = 0;
    for (const auto& f : meta_.files)
      if (f.name == name) expect = f.bytes;
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (size != expect) {
      r.reset();
      throw InputError(
          path,
          "has " + std::to_string(size) + " bytes; metadata.json says " + std::to_string(expect),
          "the file was changed or damaged after the save: use another checkpoint");
    }
  }
  return *r;
}

uint64_t CheckpointReader::chunk_base(const CheckpointTensor& t, size_t i) {
  // NOTE [Multi-box pieces of fused weights] (piece_layout.h): the chunks of `t` in one file are
  // its entry's rows, back to back in metadata order; one chunk per file (every earlier checkpoint)
  // is the whole entry.
  const CheckpointChunk& c = t.chunks.at(i);
  SafetensorsReader& f = file(c.file);
  const SafetensorsEntry& e = f.entry(t.name);
  const uint64_t esize = *safetensors_dtype_size(t.dtype);
  uint64_t base = 0;
  Shape want;
  for (size_t j = 0; j < t.chunks.size(); ++j) {
    const ChunkBox& b = t.chunks[j].box;
    if (t.chunks[j].file != c.file) continue;
    if (j < i) base += static_cast<uint64_t>(box_numel(b)) * esize;
    if (want.empty()) {
      want = b.lengths;
      continue;
    }
    if (!std::equal(b.lengths.begin() + 1, b.lengths.end(), want.begin() + 1))
      throw InputError(f.path() + ": tensor '" + t.name + "'",
                       "has chunks " + shape_str(want) + " and " + shape_str(b.lengths) +
                           " in one file that do not stack on dim 0",
                       "the metadata is damaged; use another checkpoint");
    want[0] += b.lengths[0];
  }
  if (e.dtype != t.dtype || e.shape != want)
    throw InputError(f.path() + ": tensor '" + t.name + "'",
                     "is " + e.dtype + " " + shape_str(e.shape) + "; metadata.json says " +
                         t.dtype + " " + shape_str(want),
                     "the file does not belong to this checkpoint");
  return base;
}

void CheckpointReader::read_shard(const std::string& name, int world, int rank, void* dst,
                                  uint64_t dst_bytes) {
  const CheckpointTensor* t = meta_.find(name);
  if (!t)
    throw InputError(folder_, "has no tensor '" + name + "'", "the checkpoint is of another model");
  PieceLayout l;
  l.shard_world = world;
  read_box(name, piece_box(t->shape, l, 0, rank), dst, dst_bytes);
}

void CheckpointReader::read_box(const std::string& name, const ChunkBox& want, void* dst,
                                uint64_t dst_bytes) {
  const CheckpointTensor* t = meta_.find(name);
  if (!t)
    throw InputError(folder_, "has no tensor '" + name + "'", "the checkpoint is of another model");
  const uint64_t esize = *safetensors_dtype_size(t->dtype);
  std::vector<ChunkBox> boxes;
  for (const auto& c : t->chunks) boxes.push_back(c.box);
  auto reads = reads_for_box(t->shape, esize, boxes, want);
  uint64_t total = 0;
  for (const auto& r : reads) total += r.bytes;
  FULLSHARD_CHECK(total == dst_bytes, "read_box: destination of " + std::to_string(dst_bytes) +
                                          " bytes for " + std::to_string(total) + " bytes of '" +
                                          name + "'");
  // Runs adjacent in one piece's storage (a column block read into whole rows) are one read.
  std::sort(reads.begin(), reads.end(), [](const ChunkRead& a, const ChunkRead& b) {
    return a.chunk != b.chunk ? a.chunk < b.chunk : a.src_offset < b.src_offset;
  });
  std::vector<uint8_t> staged;
  for (size_t i = 0; i < reads.size();) {
    size_t j = i + 1;
    while (j < reads.size() && reads[j].chunk == reads[i].chunk &&
           reads[j].src_offset == reads[j - 1].src_offset + reads[j - 1].bytes)
      ++j;
    const CheckpointChunk& c = t->chunks[reads[i].chunk];
    const uint64_t base = chunk_base(*t, reads[i].chunk);
    const uint64_t span = reads[j - 1].src_offset + reads[j - 1].bytes - reads[i].src_offset;
    if (j == i + 1) {
      file(c.file).read(name, base + reads[i].src_offset, span,
                        static_cast<char*>(dst) + reads[i].dst_offset);
    } else {
      staged.resize(span);
      file(c.file).read(name, base + reads[i].src_offset, span, staged.data());
      for (size_t k = i; k < j; ++k)
        std::memcpy(static_cast<char*>(dst) + reads[k].dst_offset,
                    staged.data() + (reads[k].src_offset - reads[i].src_offset), reads[k].bytes);
    }
    i = j;
  }
}

void CheckpointReader::read_boxes(const std::string& name, const std::vector<ChunkBox>& want,
                                  void* dst, uint64_t dst_bytes) {
  uint64_t at = 0;
  const CheckpointTensor* t = meta_.find(name);
  if (!t)
    throw InputError(folder_, "has no tensor '" + name + "'", "the checkpoint is of another model");
  const uint64_t esize = *safetensors_dtype_size(t->dtype);
  for (const ChunkBox& b : want) {
    const uint64_t bytes = static_cast<uint64_t>(box_numel(b)) * esize;
    FULLSHARD_CHECK(at + bytes <= dst_bytes, "read_boxes: destination of " +
                                                 std::to_string(dst_bytes) +
                                                 " bytes is too small for '" + name + "'");
    read_box(name, b, static_cast<char*>(dst) + at, bytes);
    at += bytes;
  }
  FULLSHARD_CHECK(at == dst_bytes, "read_boxes: destination of " + std::to_string(dst_bytes) +
                                       " bytes for " + std::to_string(at) + " bytes of '" + name +
                                       "'");
}

void CheckpointReader::verify() {
  for (const auto& f : meta_.files) file(f.name);
  for (const auto& t : meta_.tensors)
    for (size_t i = 0; i < t.chunks.size(); ++i) chunk_base(t, i);
}

}  // namespace fullshard
