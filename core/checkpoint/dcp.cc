#include "core/checkpoint/dcp.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/checkpoint/pickle.h"
#include "core/checkpoint/safetensors.h"
#include "core/common/error.h"

namespace fullshard {
namespace fs = std::filesystem;
namespace {

constexpr const char* kMeta = "torch.distributed.checkpoint.metadata";
constexpr const char* kOldMeta = "torch.distributed._shard.sharded_tensor.metadata";  // before 2.4
constexpr const char* kFilesystem = "torch.distributed.checkpoint.filesystem";
constexpr const char* kDcpVersion = "1.0.0";  // filesystem.py's CURRENT_DCP_VERSION

// torch dtype global names and their safetensors names (the float ones are what fullshard
// loads; the rest only name what a checkpoint holds).
constexpr std::array<std::pair<const char*, const char*>, 9> kDtypes{{{"float32", "F32"},
                                                                      {"bfloat16", "BF16"},
                                                                      {"float16", "F16"},
                                                                      {"float64", "F64"},
                                                                      {"int64", "I64"},
                                                                      {"int32", "I32"},
                                                                      {"int8", "I8"},
                                                                      {"uint8", "U8"},
                                                                      {"bool", "BOOL"}}};

PyPtr g(const char* module, const char* name) { return py_global(module, name); }
PyPtr torch_size(const Shape& s) {
  std::vector<PyPtr> dims;
  for (int64_t d : s) dims.push_back(py_int(d));
  return py_reduce(g("torch", "Size"), {py_tuple(std::move(dims))});
}

bool allowed_global(const std::string& m, const std::string& n) {
  static const std::set<std::pair<std::string, std::string>> names{
      {kMeta, "Metadata"},
      {kMeta, "TensorStorageMetadata"},
      {kMeta, "ChunkStorageMetadata"},
      {kMeta, "TensorProperties"},
      {kMeta, "_MEM_FORMAT_ENCODING"},
      {kMeta, "MetadataIndex"},
      {kMeta, "BytesStorageMetadata"},
      {kMeta, "StorageMeta"},
      {kOldMeta, "TensorProperties"},
      {kOldMeta, "MEM_FORMAT_ENCODING"},
      {kFilesystem, "_StorageInfo"},
      {"torch", "Size"},
      {"torch", "strided"},
      {"torch.serialization", "_get_layout"},
      {"pathlib", "PosixPath"},
      {"pathlib", "WindowsPath"},
      {"pathlib", "PurePosixPath"},
      {"pathlib", "PureWindowsPath"}};
  if (names.count({m, n})) return true;
  if (m != "torch") return false;
  for (const auto& d : kDtypes)
    if (n == d.first) return true;
  return false;
}

// ---------------------------------------------------------------- decoding helpers
struct Ctx {
  const std::string& source;
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(source, what,
                     "give a checkpoint torch.distributed.checkpoint's FileSystemWriter wrote");
  }
  // The state dict of an object of class `name` (module kMeta or `module`).
  const PyObj& state_of(const PyObj& v, const char* name, const char* module = kMeta) const {
    if (v.kind != PyKind::kNewObj || !v.state || v.items[0]->kind != PyKind::kGlobal ||
        v.items[0]->name != name || (v.items[0]->s != module && v.items[0]->s != kOldMeta))
      fail(std::string("expected a ") + name + ", found " + py_repr(v).substr(0, 200));
    return *v.state;
  }
  const PyObj& field(const PyObj& state, const char* key) const {
    const PyObj* f = py_dict_get(state, key);
    if (!f) fail(std::string("an object without its '") + key + "' field");
    return *f;
  }
  Shape size(const PyObj& v) const {  // torch.Size((d0, d1, ...))
    if (v.kind != PyKind::kReduce || !py_is_global(*v.items[0], "torch", "Size") ||
        v.items[1]->items.size() != 1 || v.items[1]->items[0]->kind != PyKind::kTuple)
      fail("expected a torch.Size, found " + py_repr(v).substr(0, 200));
    Shape s;
    for (const auto& d : v.items[1]->items[0]->items) {
      if (d->kind != PyKind::kInt || d->i < 0) fail("a torch.Size with " + py_repr(*d));
      s.push_back(d->i);
    }
    return s;
  }
  int64_t integer(const PyObj& v) const {
    if (v.kind != PyKind::kInt || v.i < 0) fail("expected a non-negative int, found " + py_repr(v));
    return v.i;
  }
};

std::string dtype_of(const Ctx& c, const PyObj& props) {
  // TensorProperties' state: (dtype, layout, requires_grad, memory format, pin_memory[, strides])
  const PyObj& st = c.state_of(props, "TensorProperties");
  if (st.kind != PyKind::kTuple || st.items.size() < 5 || st.items[0]->kind != PyKind::kGlobal)
    c.fail("a TensorProperties whose state is " + py_repr(st).substr(0, 200));
  for (const auto& d : kDtypes)
    if (st.items[0]->name == d.first) return d.second;
  return "torch." + st.items[0]->name;
}

class PosixFile {
 public:
  explicit PosixFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0)
      throw InputError(
          path_, std::string("cannot open: ") + std::strerror(errno),
          "the DCP folder is missing a .distcp file its .metadata lists; copy it whole");
  }
  ~PosixFile() { ::close(fd_); }
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;
  void read(uint64_t offset, uint64_t n, void* dst) const {
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (got <= 0)
        throw InputError(path_, "ends before byte " + std::to_string(offset + n) + " (truncated?)",
                         "the .distcp file is damaged; write the checkpoint again");
      p += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace

struct DcpReader::File : PosixFile {
  using PosixFile::PosixFile;
};

const DcpTensor* DcpMetadata::find(const std::string& fqn) const {
  for (const auto& t : tensors)
    if (t.fqn == fqn) return &t;
  return nullptr;
}

std::string dcp_metadata_pickle(const DcpMetadata& m) {
  std::vector<PyPtr> sdm, planner, storage;
  for (const auto& t : m.tensors) {
    const char* torch_dtype = nullptr;
    for (const auto& d : kDtypes)
      if (t.dtype == d.second) torch_dtype = d.first;
    FULLSHARD_CHECK(torch_dtype, "dcp_metadata_pickle: dtype " + t.dtype);
    PyPtr props = py_newobj(
        g(kMeta, "TensorProperties"),
        py_tuple({g("torch", torch_dtype),
                  py_reduce(g("torch.serialization", "_get_layout"), {py_str("torch.strided")}),
                  py_bool(false), py_reduce(g(kMeta, "_MEM_FORMAT_ENCODING"), {py_int(0)}),
                  py_bool(false)}));
    std::vector<PyPtr> chunks;
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      const DcpChunk& c = t.chunks[i];
      chunks.push_back(py_newobj(g(kMeta, "ChunkStorageMetadata"),
                                 py_dict({py_str("offsets"), torch_size(c.box.offsets),
                                          py_str("sizes"), torch_size(c.box.lengths)})));
      storage.push_back(py_newobj(
          g(kMeta, "MetadataIndex"),
          py_dict({py_str("fqn"), py_str(t.fqn), py_str("offset"), torch_size(c.box.offsets),
                   py_str("index"), py_int(static_cast<int64_t>(i))})));
      storage.push_back(
          py_newobj(g(kFilesystem, "_StorageInfo"),
                    py_dict({py_str("relative_path"), py_str(c.file), py_str("offset"),
                             py_int(static_cast<int64_t>(c.offset)), py_str("length"),
                             py_int(static_cast<int64_t>(c.length))})));
    }
    sdm.push_back(py_str(t.fqn));
    sdm.push_back(py_newobj(g(kMeta, "TensorStorageMetadata"),
                            py_dict({py_str("properties"), props, py_str("size"),
                                     torch_size(t.shape), py_str("chunks"), py_list(chunks)})));
    planner.push_back(py_str(t.fqn));
    planner.push_back(t.path ? t.path : py_tuple({py_str(t.fqn)}));
  }
  for (const auto& e : m.bytes) {  // BytesStorageMetadata: MetadataIndex(fqn) -> its archive
    sdm.push_back(py_str(e.fqn));
    sdm.push_back(py_newobj(g(kMeta, "BytesStorageMetadata"), nullptr));
    planner.push_back(py_str(e.fqn));
    planner.push_back(e.path ? e.path : py_tuple({py_str(e.fqn)}));
    storage.push_back(py_newobj(g(kMeta, "MetadataIndex"),
                                py_dict({py_str("fqn"), py_str(e.fqn), py_str("offset"), py_none(),
                                         py_str("index"), py_none()})));
    storage.push_back(py_newobj(g(kFilesystem, "_StorageInfo"),
                                py_dict({py_str("relative_path"), py_str(e.file), py_str("offset"),
                                         py_int(static_cast<int64_t>(e.offset)), py_str("length"),
                                         py_int(static_cast<int64_t>(e.length))})));
  }
  const PyPtr md = py_newobj(
      g(kMeta, "Metadata"),
      py_dict({py_str("state_dict_metadata"), py_dict(std::move(sdm)), py_str("planner_data"),
               py_dict(std::move(planner)), py_str("storage_data"), py_dict(std::move(storage)),
               py_str("storage_meta"), py_none(), py_str("version"), py_str(kDcpVersion)}));
  return pickle_dumps(*md);
}

DcpMetadata dcp_metadata_from_pickle(std::string_view bytes, const std::string& source) {
  const PyPtr root = pickle_loads(bytes, source, allowed_global);
  const Ctx c{source};
  const PyObj& st = c.state_of(*root, "Metadata");
  const PyObj& sdm = c.field(st, "state_dict_metadata");
  if (sdm.kind != PyKind::kDict) c.fail("state_dict_metadata is not a dict");
  DcpMetadata m;
  for (size_t k = 0; k < sdm.items.size(); k += 2) {
    const PyObj &key = *sdm.items[k], &v = *sdm.items[k + 1];
    if (key.kind != PyKind::kStr) c.fail("a state_dict_metadata key that is not a str");
    if (v.kind == PyKind::kNewObj && v.items[0]->kind == PyKind::kGlobal &&
        v.items[0]->name == "BytesStorageMetadata") {
      m.non_tensors.push_back(key.s);
      continue;
    }
    const PyObj& ts = c.state_of(v, "TensorStorageMetadata");
    DcpTensor t{key.s, dtype_of(c, c.field(ts, "properties")), c.size(c.field(ts, "size")), {}};
    const PyObj& chunks = c.field(ts, "chunks");
    if (chunks.kind != PyKind::kList) c.fail("tensor '" + key.s + "': chunks is not a list");
    for (const auto& ch : chunks.items) {
      const PyObj& cs = c.state_of(*ch, "ChunkStorageMetadata");
      DcpChunk chunk;
      chunk.box = {c.size(c.field(cs, "offsets")), c.size(c.field(cs, "sizes"))};
      if (chunk.box.offsets.size() != t.shape.size() || chunk.box.lengths.size() != t.shape.size())
        c.fail("tensor '" + key.s + "': a chunk of rank other than the tensor's");
      t.chunks.push_back(std::move(chunk));
    }
    m.tensors.push_back(std::move(t));
  }
  // storage_data: MetadataIndex(fqn, offset, index) -> _StorageInfo(relative_path, offset, length)
  const PyObj& sd = c.field(st, "storage_data");
  if (sd.kind != PyKind::kDict) c.fail("storage_data is not a dict");
  std::set<std::pair<std::string, Shape>> seen;
  for (size_t k = 0; k < sd.items.size(); k += 2) {
    const PyObj& idx = c.state_of(*sd.items[k], "MetadataIndex");
    const PyObj& info = c.state_of(*sd.items[k + 1], "_StorageInfo", kFilesystem);
    const PyObj& fqn = c.field(idx, "fqn");
    if (fqn.kind != PyKind::kStr) c.fail("a MetadataIndex whose fqn is not a str");
    if (const PyObj* td = py_dict_get(info, "transform_descriptors");
        td && td->kind == PyKind::kList && !td->items.empty())
      c.fail("tensor '" + fqn.s + "' is stored through transforms " + py_repr(*td) +
             " (compression or encryption), which fullshard does not read");
    if (std::find(m.non_tensors.begin(), m.non_tensors.end(), fqn.s) != m.non_tensors.end())
      continue;
    const PyObj& path = c.field(info, "relative_path");
    if (path.kind != PyKind::kStr || path.s.empty() || path.s.find('/') != std::string::npos ||
        path.s.find('\\') != std::string::npos || path.s == "." || path.s == "..")
      c.fail("tensor '" + fqn.s + "': relative_path " + py_repr(path) +
             " is not a file in the folder");
    const Shape offsets = c.size(c.field(idx, "offset"));
    DcpChunk* chunk = nullptr;
    for (auto& t : m.tensors)
      if (t.fqn == fqn.s)
        for (auto& ch : t.chunks)
          if (ch.box.offsets == offsets) chunk = &ch;
    if (!chunk)
      c.fail("storage_data names a chunk '" + fqn.s + "' @ " + shape_str(offsets) +
             " that state_dict_metadata does not list");
    if (!seen.insert({fqn.s, offsets}).second)
      c.fail("two storage_data entries for '" + fqn.s + "' @ " + shape_str(offsets));
    chunk->file = path.s;
    chunk->offset = static_cast<uint64_t>(c.integer(c.field(info, "offset")));
    chunk->length = static_cast<uint64_t>(c.integer(c.field(info, "length")));
  }
  for (const auto& t : m.tensors) {
    for (const auto& ch : t.chunks)
      if (ch.file.empty() && box_numel(ch.box) > 0)
        c.fail("tensor '" + t.fqn + "': chunk " + box_str(ch.box) + " has no storage_data entry");
    if (t.shape.empty()) {  // a 0-d tensor (AdamW's step): one chunk without offsets
      if (t.chunks.size() != 1)
        c.fail("0-d tensor '" + t.fqn + "' has " + std::to_string(t.chunks.size()) +
               " chunks, not 1");
      continue;
    }
    std::vector<ChunkBox> boxes;
    for (const auto& ch : t.chunks) boxes.push_back(ch.box);
    validate_boxes(t.shape, boxes, source + ": tensor '" + t.fqn + "'");
  }
  return m;
}

bool is_dcp_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / kDcpMetadataFile, ec);
}

DcpReader::DcpReader(std::string folder) : folder_(std::move(folder)) {
  const std::string path = (fs::path(folder_) / kDcpMetadataFile).string();
  File f(path);
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec || size > (uint64_t{1} << 30))
    throw InputError(path, "is not a readable file of at most 1 GiB",
                     "give a DCP checkpoint folder");
  std::string bytes(size, '\0');
  f.read(0, size, bytes.data());
  meta_ = dcp_metadata_from_pickle(bytes, path);
}

DcpReader::~DcpReader() = default;

DcpReader::File& DcpReader::file(const std::string& name) {
  auto it = files_.find(name);
  if (it == files_.end())
    it = files_.emplace(name, std::make_unique<File>((fs::path(folder_) / name).string())).first;
  return *it->second;
}

uint64_t DcpReader::data_start(const DcpTensor& t, const DcpChunk& c) {
  const auto key = std::make_pair(c.file, c.offset);
  if (auto it = starts_.find(key); it != starts_.end()) return it->second;
  File& f = file(c.file);
  const std::string where = f.path() + " (tensor '" + t.fqn + "' " + box_str(c.box) + " at byte " +
                            std::to_string(c.offset) + ")";
  const TorchSavedTensor s =
      parse_torch_save([&](uint64_t off, uint64_t n, void* dst) { f.read(c.offset + off, n, dst); },
                       c.length, where);
  if (s.dtype != t.dtype || s.shape != c.box.lengths)
    throw InputError(
        where,
        "holds a " + s.dtype + " " + shape_str(s.shape) + " tensor, but .metadata says " + t.dtype +
            " " + shape_str(c.box.lengths),
        "the folder's files do not belong to its .metadata; write the checkpoint again");
  return starts_[key] = c.offset + s.data_offset;
}

void DcpReader::read_box(const std::string& fqn, const ChunkBox& want, void* dst,
                         uint64_t dst_bytes) {
  const DcpTensor* t = meta_.find(fqn);
  if (!t) throw InputError(folder_, "no tensor '" + fqn + "' in the DCP checkpoint", "");
  const auto esize = safetensors_dtype_size(t->dtype);
  if (!esize)
    throw InputError(folder_ + ": tensor '" + fqn + "'",
                     "has dtype " + t->dtype + ", which fullshard does not read",
                     "save float32, bfloat16 or float16 tensors");
  FULLSHARD_CHECK(dst_bytes == static_cast<uint64_t>(box_numel(want)) * *esize,
                  "DcpReader::read_box: size");
  if (t->shape.empty()) {  // 0-d: its one element
    file(t->chunks[0].file).read(data_start(*t, t->chunks[0]), *esize, dst);
    return;
  }
  std::vector<ChunkBox> boxes;
  for (const auto& c : t->chunks) boxes.push_back(c.box);
  for (const ChunkRead& r : reads_for_box(t->shape, *esize, boxes, want)) {
    const DcpChunk& c = t->chunks[r.chunk];
    const uint64_t start = data_start(*t, c);
    file(c.file).read(start + r.src_offset, r.bytes, static_cast<char*>(dst) + r.dst_offset);
  }
}

}  // namespace fullshard
