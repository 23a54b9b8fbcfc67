#pragma once
// A checkpoint folder on disk (docs/checkpoints.md):
//   DIR/step-00000006/shard-00000-of-00002.safetensors   one per shard rank (its pieces)
//   DIR/step-00000006/metadata.json                     written last: the commit
//   DIR/latest                                           "step-00000006", updated after
//
// NOTE [Checkpoint commit]: as DCP does, every rank writes only what it holds, and the save
// is committed by one file written last. Each rank file is written to a temporary name,
// fsync()ed and renamed (OutputFile); once every rank's file is in place (a barrier), rank 0
// writes metadata.json the same way and fsyncs the folder. A folder without metadata.json is
// an unfinished save and is never loaded, so a crash at any point leaves the previous
// checkpoint intact and loadable. `latest` is a convenience updated after the commit; the
// resolver does not trust it alone: it loads the highest step whose metadata.json exists.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_metadata.h"
#include "core/checkpoint/safetensors.h"

namespace fullshard {

std::string step_folder_name(int64_t step);                    // "step-00000006"
std::string shard_file_name(int shard_rank, int shard_world);  // "shard-00000-of-00002.safetensors"
inline constexpr const char* kMetadataFile = "metadata.json";
inline constexpr const char* kLatestFile = "latest";

// Creates `root`/step-N (and `root`), removing a stale metadata.json of an earlier save of
// the same step so that the folder is uncommitted while it is rewritten, then its other files.
// Called by rank 0 before the ranks write. Throws InputError naming `flag` when the folder cannot
// be made.
std::string begin_checkpoint(const std::string& root, int64_t step, const std::string& flag);
// Rank 0, after every rank file is written: fills `m.files` sizes from disk, writes
// metadata.json (atomically), fsyncs the folder, then updates `latest` and fsyncs the root.
void commit_checkpoint(const std::string& root, CheckpointMetadata m, const std::string& flag);

// NOTE [Checkpoint retention]: as torchtitan's checkpoint.keep_latest_k, after a commit the
// committed checkpoints older than the newest `keep_last` are deleted. The one just committed
// is the newest, so it is never deleted, and no save is in flight (saves are serialized).
// A deletion must never leave a folder that looks committed but is not whole: each folder is
// first renamed to a name the resolver ignores (".deleting-step-N", one atomic rename, the
// root fsynced), then removed. A kill at any point leaves every kept checkpoint intact and at
// most one ".deleting-*" folder, which the next prune removes. Unfinished folders (no
// metadata.json) older than the oldest kept checkpoint are remnants of a killed save and go
// the same way; newer ones are left alone.
// Deletes as above; keep_last <= 0 keeps everything. Returns the folder names deleted.
// Throws InputError naming `flag` when a folder cannot be renamed or removed.
std::vector<std::string> prune_checkpoints(const std::string& root, int keep_last,
                                           const std::string& flag);
inline constexpr const char* kDeletingPrefix = ".deleting-";

// The checkpoint folder `which` names: "latest" (the highest committed step under `root`) or a
// folder path (a step folder, or a root, then its latest). Throws InputError naming `flag`
// when there is none.
std::string resolve_checkpoint(const std::string& root_or_folder, const std::string& flag);

// Reads a committed checkpoint folder.
class CheckpointReader {
 public:
  explicit CheckpointReader(std::string folder);  // parses and validates metadata.json
  const CheckpointMetadata& metadata() const { return meta_; }
  const std::string& folder() const { return folder_; }
  // Fills `dst` (`dst_bytes`: the unpadded local shard of `name` for shard rank `rank` of
  // `world`) with only the byte ranges that rank holds (NOTE [Reshard on load]). Throws
  // InputError naming the file and tensor when a file does not match the metadata.
  void read_shard(const std::string& name, int world, int rank, void* dst, uint64_t dst_bytes);
  // Fills `dst` (`dst_bytes`: the row-major box `want` of tensor `name`) from the stored
  // pieces that intersect it, one file read per run of contiguous source bytes (NOTE [Pieces
  // as boxes]).
  void read_box(const std::string& name, const ChunkBox& want, void* dst, uint64_t dst_bytes);
  // Fills `dst` with the boxes `want` one after another (a multi-box piece: NOTE [Multi-box
  // pieces of fused weights]), each as read_box does.
  void read_boxes(const std::string& name, const std::vector<ChunkBox>& want, void* dst,
                  uint64_t dst_bytes);
  // Opens every file and checks its size, header and every chunk's entry (dtype, shape)
  // against the metadata. Throws InputError at the first mismatch.
  void verify();

 private:
  SafetensorsReader& file(const std::string& name);
  // The byte offset of chunk `i` of `t` inside its file's entry, after checking that entry
  // (dtype; shape: the file's chunks of `t` stacked on dim 0).
  uint64_t chunk_base(const CheckpointTensor& t, size_t i);
  std::string folder_;
  CheckpointMetadata meta_;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> files_;
};

}  // namespace fullshard
