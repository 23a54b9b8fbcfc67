#pragma once
// PyTorch's Distributed Checkpoint in its own format (torch.distributed.checkpoint's
// FileSystemWriter / FileSystemReader, docs/checkpoints.md "DCP's own format"): a folder with
// `.metadata` (a pickled torch.distributed.checkpoint.metadata.Metadata) and `__<rank>_<n>.distcp`
// files holding each chunk as a torch.save archive (core/checkpoint/torch_save.h).
//
// NOTE [DCP's own format]: Metadata.state_dict_metadata maps every state-dict key (a module
// FQN such as "model.layers.0.self_attn.q_proj.weight") to a TensorStorageMetadata: the
// TensorProperties (dtype, layout, requires_grad, memory format, pin_memory), the global
// torch.Size and one ChunkStorageMetadata {offsets, sizes} per stored piece, the box of the
// global tensor a rank's DTensor local shard covers (for FSDP2's Shard(0), torch.chunk's rows:
// fullshard's pieces, NOTE [Pieces as boxes]). Metadata.storage_data maps
// MetadataIndex(fqn, offsets, index) to _StorageInfo(relative_path, offset, length): the
// byte range of that piece's torch.save archive in a .distcp file. DCP's loader intersects
// each rank's local box with the stored boxes (create_read_items_for_chunk_list), torch.loads
// the archive and narrows it, so the saving and loading meshes are independent. We write what
// FileSystemWriter writes (one file per saving rank, pieces back to back; Metadata pickled
// with `planner_data` {fqn: (fqn,)} and `version` "1.0.0"; TensorProperties' 5-element
// state, which every DCP version reads) and read the same, refusing anything but tensors
// (see torch/distributed/checkpoint/{metadata,filesystem,default_planner}.py, PyTorch 2.15).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_dir.h"
#include "core/checkpoint/reshard.h"
#include "core/checkpoint/torch_save.h"

namespace fullshard {

inline constexpr const char* kDcpMetadataFile = ".metadata";

struct DcpChunk {
  ChunkBox box;         // ChunkStorageMetadata: offsets, sizes
  std::string file;     // _StorageInfo.relative_path
  uint64_t offset = 0;  // _StorageInfo.offset: the archive's first byte in the file
  uint64_t length = 0;  // _StorageInfo.length
};

struct PyObj;

struct DcpTensor {
  std::string fqn;
  std::string dtype;  // safetensors name (F32, BF16, F16)
  Shape shape;        // global ([] for a 0-d tensor such as AdamW's step: one chunk, no offsets)
  std::vector<DcpChunk> chunks;
  // planner_data's value: the key's path in the unflattened state dict, e.g. ('state', fqn,
  // 'exp_avg'); null: (fqn,). Written only (NOTE [AdamW state in DCP], core/checkpoint/dcp_optim.h).
  std::shared_ptr<PyObj> path;
};

// A non-tensor entry (BytesStorageMetadata): torch.save of a Python value (torch_save_object).
struct DcpBytes {
  std::string fqn;
  std::string file;
  uint64_t offset = 0, length = 0;
  std::shared_ptr<PyObj> path;  // as DcpTensor::path
};

struct DcpMetadata {
  std::vector<DcpTensor> tensors;        // in the file's order
  std::vector<std::string> non_tensors;  // BytesStorageMetadata keys (read past, never loaded)
  std::vector<DcpBytes> bytes;           // written: the non-tensor entries (the reader leaves it empty)
  const DcpTensor* find(const std::string& fqn) const;
};

// The `.metadata` bytes of `m` and back (NOTE [DCP's own format]). The reader accepts only the
// classes a tensor checkpoint holds and throws InputError naming `source` otherwise.
std::string dcp_metadata_pickle(const DcpMetadata& m);
DcpMetadata dcp_metadata_from_pickle(std::string_view bytes, const std::string& source);

// True when `path` is a folder holding a `.metadata` file.
bool is_dcp_folder(const std::string& path);

// Reads a DCP folder: every rank reads only the bytes of the boxes it asks for.
class DcpReader {
 public:
  explicit DcpReader(std::string folder);  // parses .metadata; checks every tensor's chunks tile it
  ~DcpReader();
  const DcpMetadata& metadata() const { return meta_; }
  const std::string& folder() const { return folder_; }
  // Fills `dst` (`dst_bytes`: box `want` of tensor `fqn`, row-major, in the stored dtype) from
  // the chunks that intersect it. Throws InputError naming the file for a damaged archive.
  void read_box(const std::string& fqn, const ChunkBox& want, void* dst, uint64_t dst_bytes);

 private:
  struct File;
  File& file(const std::string& name);
  // Where chunk `c` of `t`'s elements start in its file (its archive parsed once).
  uint64_t data_start(const DcpTensor& t, const DcpChunk& c);
  std::string folder_;
  DcpMetadata meta_;
  std::map<std::string, std::unique_ptr<File>> files_;
  std::map<std::pair<std::string, uint64_t>, uint64_t> starts_;  // (file, archive offset) -> data
};

struct DcpExportOptions {
  std::string out;  // the folder to write
  bool hf_names =
      true;  // Hugging Face names and layouts (NOTE [Hugging Face layouts]) or fullshard's
  bool optimizer = true;  // AdamW's state too, when the checkpoint has it (NOTE [AdamW state in DCP])
};

struct DcpExportResult {
  std::vector<std::string> files;  // written: the .distcp files, then .metadata
  size_t tensors = 0, chunks = 0;  // the model state dict's (parameters, persistent buffers)
  uint64_t data_bytes = 0;        // parameters and optimizer state
  size_t optimizer_tensors = 0, optimizer_chunks = 0;  // AdamW's state tensors and their chunks
  size_t param_group_entries = 0;                      // BytesStorageMetadata entries
  std::string optimizer_note;  // why no optimizer state was exported ("" when it was or none)
};

// Writes the parameters and persistent buffers of the checkpoint `reader` reads as a DCP
// folder: file `__<i>_0.distcp` holds the pieces of fullshard shard file i, each as its own chunk
// (transposed Conv1D weights as the transposed box), and AdamW's state with the keys of
// get_optimizer_state_dict (NOTE [AdamW state in DCP]). Throws InputError naming "--dcp".
DcpExportResult export_dcp(CheckpointReader& reader, const DcpExportOptions& o);

}  // namespace fullshard
