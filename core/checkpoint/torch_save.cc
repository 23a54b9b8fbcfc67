#include "core/checkpoint/torch_save.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>

#include "core/checkpoint/pickle.h"
#include "core/checkpoint/safetensors.h"
#include "core/common/error.h"

namespace fullshard {
namespace {

constexpr uint64_t kAlignment = 64;  // torch.serialization's storage_alignment default
constexpr uint32_t kLocal = 0x04034b50, kCentral = 0x02014b50, kDescriptor = 0x08074b50,
                   kEnd = 0x06054b50, kEnd64 = 0x06064b50, kLocator64 = 0x07064b50;

struct StorageName {
  const char* dtype;    // safetensors
  const char* storage;  // torch's typed storage class
};
constexpr std::array<StorageName, 3> kStorages{
    {{"F32", "FloatStorage"}, {"BF16", "BFloat16Storage"}, {"F16", "HalfStorage"}}};

void le(std::string& out, uint64_t v, int bytes) {
  for (int b = 0; b < bytes; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
}
void zeros(std::string& out, size_t n) { out.append(n, '\0'); }
uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) v |= uint64_t{p[b]} << (8 * b);
  return v;
}

// data.pkl of a contiguous tensor (NOTE [torch.save archives]).
PyPtr rebuild_call(const char* storage, const Shape& shape) {
  std::vector<PyPtr> size, stride(shape.size());
  int64_t numel = 1, s = 1;
  for (int64_t d : shape) {
    size.push_back(py_int(d));
    numel *= d;
  }
  for (size_t d = shape.size(); d-- > 0;) {
    stride[d] = py_int(s);
    s *= shape[d];
  }
  PyPtr id = py_tuple(
      {py_str("storage"), py_global("torch", storage), py_str("0"), py_str("cpu"), py_int(numel)});
  return py_reduce(py_global("torch._utils", "_rebuild_tensor_v2"),
                   {py_persid(id), py_int(0), py_tuple(size), py_tuple(stride), py_bool(false),
                    py_reduce(py_global("collections", "OrderedDict"), {})});
}

// NOTE [Zip64 records as PyTorch writes them]: PyTorchStreamWriter opens miniz with
// MZ_ZIP_FLAG_WRITE_ZIP64 (caffe2/serialize/inline_container.cc, pytorch/pytorch 3834689c), and
// miniz (third_party/miniz-3.0.2/miniz.c at 01f9ef32: mz_zip_writer_add_mem_ex_v2,
// mz_zip_writer_finalize_archive) then gives a record whose size or local header offset is
// >= 0xffffffff: a zip64 extra field (id 1) in the local header, before the "FB" padding,
// holding the size and a compressed size of 0 (miniz has not stored the data yet) if the size
// overflows, and the offset if that does; a 24-byte data descriptor (64-bit sizes); and in the
// central directory 0xffffffff in each overflowing field, the same extra field holding the true
// values. Other records keep 32-bit fields. The plain end record's count, directory size and
// offset are clamped to 0xffff / 0xffffffff; the zip64 end record (always there) holds them
// whole. getPadding there counts the zip64 field (4 + 16 + 8 bytes), so data stays 64-aligned.
// TorchSaveOptions::zip64_threshold stands for 0xffffffff so tests can force these records.
struct Record {
  std::string name;
  std::string_view data;
  uint64_t size = 0;     // of its data
  uint32_t crc = 0;      // of its data
  bool outside = false;  // the data is the caller's: not copied (TorchSaveParts)
  uint64_t offset = 0;   // of its local header
  bool zip64 = false;    // NOTE [Zip64 records as PyTorch writes them]
};

Record record(std::string name, std::string_view data) {
  return {std::move(name), data, data.size(), crc32(data)};
}

// The zip64 extended-information extra field (id 1) of `r`: its size twice (uncompressed,
// compressed: `compressed` is what miniz has at that point) when the size overflows, its local
// header's offset when that does.
void zip64_extra(std::string& out, const Record& r, uint64_t compressed, uint64_t limit) {
  const bool size = r.size >= limit, offset = r.offset >= limit;
  le(out, 1, 2);
  le(out, 8 * (2 * size + offset), 2);
  if (size) {
    le(out, r.size, 8);
    le(out, compressed, 8);
  }
  if (offset) le(out, r.offset, 8);
}
uint64_t zip64_extra_size(const Record& r, uint64_t limit) {
  return r.zip64 ? 4 + 16 * (r.size >= limit) + 8 * (r.offset >= limit) : 0;
}

// The stored zip archive of `records` in order (NOTE [torch.save archives], NOTE [Zip64 records
// as PyTorch writes them]) into `head`, and, from the data of the record whose data is outside,
// into `tail` (which stays empty without one).
void zip_archive(std::vector<Record>& records, const TorchSaveOptions& o, std::string& head,
                 std::string& tail) {
  const uint64_t limit = o.zip64_threshold;
  std::string* out = &head;
  uint64_t skipped = 0;  // the outside record's data, between head and tail
  auto pos = [&] { return head.size() + skipped + tail.size(); };
  for (auto& r : records) {
    r.offset = pos();
    r.zip64 = r.size >= limit || r.offset >= limit;
    le(*out, kLocal, 4);
    le(*out, 0, 2);                      // version needed
    le(*out, 0x0808, 2);                 // data descriptor follows; UTF-8 names
    zeros(*out, 2 + 2 + 2 + 4 + 4 + 4);  // stored, time, date, crc / sizes in the descriptor
    le(*out, r.name.size(), 2);
    const uint64_t z64 = zip64_extra_size(r, limit);
    const uint64_t header = pos() + 2 + r.name.size() + z64;
    uint64_t pad = (kAlignment - (header + 4) % kAlignment) % kAlignment;  // after "FB" + length
    le(*out, z64 + 4 + pad, 2);
    *out += r.name;
    if (r.zip64) zip64_extra(*out, r, 0, limit);
    *out += "FB";
    le(*out, pad, 2);
    out->append(pad, 'Z');
    if (r.outside) {
      skipped = r.size;
      out = &tail;
    } else {
      *out += r.data;
    }
    le(*out, kDescriptor, 4);
    le(*out, r.crc, 4);
    le(*out, r.size, r.zip64 ? 8 : 4);
    le(*out, r.size, r.zip64 ? 8 : 4);
  }
  auto clamp = [&](uint64_t v) { return v >= limit ? 0xffffffffu : v; };
  const uint64_t cd = pos();
  for (const auto& r : records) {
    le(*out, kCentral, 4);
    zeros(*out, 2 + 2);  // version made by, needed
    le(*out, 0x0808, 2);
    zeros(*out, 2 + 2 + 2);  // stored, time, date
    le(*out, r.crc, 4);
    le(*out, clamp(r.size), 4);
    le(*out, clamp(r.size), 4);
    le(*out, r.name.size(), 2);
    le(*out, zip64_extra_size(r, limit), 2);
    zeros(*out, 2 + 2 + 2 + 4);  // comment, disk, internal / external attributes
    le(*out, clamp(r.offset), 4);
    *out += r.name;
    if (r.zip64) zip64_extra(*out, r, r.size, limit);
  }
  const uint64_t cd_size = pos() - cd, end64 = pos();
  le(*out, kEnd64, 4);
  le(*out, 44, 8);
  le(*out, 0x031e, 2);
  le(*out, 0x002d, 2);
  zeros(*out, 4 + 4);
  le(*out, records.size(), 8);
  le(*out, records.size(), 8);
  le(*out, cd_size, 8);
  le(*out, cd, 8);
  le(*out, kLocator64, 4);
  le(*out, 0, 4);
  le(*out, end64, 8);
  le(*out, 1, 4);
  le(*out, kEnd, 4);
  zeros(*out, 2 + 2);
  le(*out, std::min<uint64_t>(records.size(), 0xffff), 2);
  le(*out, std::min<uint64_t>(records.size(), 0xffff), 2);
  le(*out, clamp(cd_size), 4);
  le(*out, clamp(cd), 4);
  le(*out, 0, 2);
}

}  // namespace

uint32_t crc32(std::string_view data, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (unsigned char ch : data) crc = table[(crc ^ ch) & 0xff] ^ (crc >> 8);
  return ~crc;
}

TorchSaveParts torch_save_archive_parts(std::string_view dtype, const Shape& shape,
                                        uint64_t data_size, uint32_t data_crc,
                                        const std::string& where, const TorchSaveOptions& o) {
  const StorageName* st = nullptr;
  for (const auto& s : kStorages)
    if (dtype == s.dtype) st = &s;
  if (!st)
    throw InputError(where, "dtype " + std::string(dtype) + " has no torch.save writer here",
                     "export F32, BF16 or F16 tensors");
  FULLSHARD_CHECK(data_size == static_cast<uint64_t>(numel(shape)) * *safetensors_dtype_size(dtype),
                  "torch_save_archive: data size");
  FULLSHARD_CHECK(o.zip64_threshold <= 0xffffffffu, "torch_save_archive: zip64 threshold");
  const std::string pkl = pickle_dumps(*rebuild_call(st->storage, shape));
  std::vector<Record> records{record("archive/data.pkl", pkl),
                              record("archive/.format_version", "1"),
                              record("archive/.storage_alignment", "64"),
                              record("archive/byteorder", "little"),
                              {"archive/data/0", {}, data_size, data_crc, true},
                              record("archive/version", "3\n")};
  TorchSaveParts parts;
  zip_archive(records, o, parts.head, parts.tail);
  return parts;
}

std::string torch_save_archive(std::string_view dtype, const Shape& shape, std::string_view data,
                               const std::string& where, const TorchSaveOptions& o) {
  TorchSaveParts parts = torch_save_archive_parts(dtype, shape, data.size(), crc32(data), where, o);
  parts.head.reserve(parts.head.size() + data.size() + parts.tail.size());
  parts.head += data;
  parts.head += parts.tail;
  return std::move(parts.head);
}

std::string torch_save_object(const PyObj& v) {
  const std::string pkl = pickle_dumps(v);
  std::vector<Record> records{
      record("archive/data.pkl", pkl), record("archive/.format_version", "1"),
      record("archive/.storage_alignment", "64"), record("archive/byteorder", "little"),
      record("archive/version", "3\n")};
  std::string out, tail;
  zip_archive(records, TorchSaveOptions{}, out, tail);
  return out;
}

TorchSavedTensor parse_torch_save(const ArchiveReader& read, uint64_t length,
                                  const std::string& source) {
  auto bad = [&](const std::string& what) -> InputError {
    return InputError(source, "torch.save archive: " + what,
                      "the .distcp file is damaged or was not written by "
                      "torch.distributed.checkpoint; write it again");
  };
  if (length < 22) throw bad(fmt::format("{} bytes is too short for a zip archive", length));
  std::array<uint8_t, 22> end{};
  read(length - 22, 22, end.data());
  if (get_le(end.data(), 4) != kEnd) throw bad("no zip end record at its last 22 bytes");
  uint64_t entries = get_le(end.data() + 10, 2), cd_size = get_le(end.data() + 12, 4),
           cd = get_le(end.data() + 16, 4);
  if (cd_size == 0xffffffffu || cd == 0xffffffffu || entries == 0xffff) {  // zip64: the locator
    if (length < 22 + 20 + 56) throw bad("a zip64 end record that does not fit");
    std::array<uint8_t, 20> loc{};
    read(length - 22 - 20, 20, loc.data());
    const uint64_t at = get_le(loc.data() + 8, 8);
    if (get_le(loc.data(), 4) != kLocator64 || at > length - 56)
      throw bad("a damaged zip64 locator");
    std::array<uint8_t, 56> e64{};
    read(at, 56, e64.data());
    if (get_le(e64.data(), 4) != kEnd64) throw bad("a damaged zip64 end record");
    entries = get_le(e64.data() + 32, 8);
    cd_size = get_le(e64.data() + 40, 8);
    cd = get_le(e64.data() + 48, 8);
  }
  if (cd > length || cd_size > length - cd || cd_size > (uint64_t{1} << 20) || entries > 4096)
    throw bad(
        fmt::format("a central directory of {} bytes at {} ({} entries)", cd_size, cd, entries));
  std::vector<uint8_t> dir(cd_size);
  read(cd, cd_size, dir.data());
  struct Found {
    uint64_t offset = 0, size = 0;
    bool present = false;
  };
  Found pkl, data;
  std::string prefix, data_name;
  size_t p = 0;
  std::vector<std::pair<std::string, Found>> all;
  for (uint64_t k = 0; k < entries; ++k) {
    if (dir.size() - p < 46 || get_le(&dir[p], 4) != kCentral)
      throw bad("a damaged central directory");
    const uint64_t method = get_le(&dir[p + 10], 2), name_len = get_le(&dir[p + 28], 2),
                   extra_len = get_le(&dir[p + 30], 2), comment_len = get_le(&dir[p + 32], 2);
    uint64_t csize = get_le(&dir[p + 20], 4), usize = get_le(&dir[p + 24], 4),
             local = get_le(&dir[p + 42], 4);
    if (dir.size() - p - 46 < name_len + extra_len + comment_len)
      throw bad("a damaged central directory");
    const std::string name(reinterpret_cast<const char*>(&dir[p + 46]), name_len);
    for (size_t x = p + 46 + name_len; x + 4 <= p + 46 + name_len + extra_len;) {  // zip64 sizes
      const uint64_t id = get_le(&dir[x], 2), n = get_le(&dir[x + 2], 2);
      size_t f = x + 4;
      const size_t stop = std::min<size_t>(f + n, p + 46 + name_len + extra_len);
      if (id == 1) {
        for (uint64_t* v : {&usize, &csize, &local})
          if (*v == 0xffffffffu && f + 8 <= stop) {
            *v = get_le(&dir[f], 8);
            f += 8;
          }
      }
      x += 4 + n;
    }
    if (method != 0 || csize != usize)
      throw bad("record '" + name + "' is compressed (only stored records are read)");
    all.push_back({name, {local, usize, true}});
    p += 46 + name_len + extra_len + comment_len;
  }
  if (all.empty()) throw bad("no records");
  prefix = all.front().first.substr(0, all.front().first.find('/'));
  auto locate = [&](const std::string& name) {
    for (const auto& [n, f] : all)
      if (n == prefix + "/" + name) {
        std::array<uint8_t, 30> h{};
        if (f.offset > length - 30) throw bad("record '" + n + "' outside the archive");
        read(f.offset, 30, h.data());
        if (get_le(h.data(), 4) != kLocal) throw bad("record '" + n + "' has no local header");
        const uint64_t at = f.offset + 30 + get_le(h.data() + 26, 2) + get_le(h.data() + 28, 2);
        if (at > length || f.size > length - at)
          throw bad("record '" + n + "' outside the archive");
        return Found{at, f.size, true};
      }
    throw bad("no record '" + prefix + "/" + name + "'");
  };
  pkl = locate("data.pkl");
  if (pkl.size > (uint64_t{1} << 20))
    throw bad("a data.pkl of " + std::to_string(pkl.size) + " bytes");
  std::string pbytes(pkl.size, '\0');
  read(pkl.offset, pkl.size, pbytes.data());
  const PyPtr v =
      pickle_loads(pbytes, source + ": data.pkl", [](const std::string& m, const std::string& n) {
        if (m == "torch._utils") return n == "_rebuild_tensor_v2";
        if (m == "collections") return n == "OrderedDict";
        if (m != "torch") return false;
        for (const auto& s : kStorages)
          if (n == s.storage) return true;
        return false;
      });
  // _rebuild_tensor_v2(persid(('storage', <Storage>, key, location, numel)), offset, size, stride,
  // ...)
  const auto& args = v->kind == PyKind::kReduce ? v->items[1]->items : std::vector<PyPtr>{};
  if (v->kind != PyKind::kReduce ||
      !py_is_global(*v->items[0], "torch._utils", "_rebuild_tensor_v2") || args.size() < 4 ||
      args[0]->kind != PyKind::kPersId || args[1]->kind != PyKind::kInt ||
      args[2]->kind != PyKind::kTuple || args[3]->kind != PyKind::kTuple)
    throw bad("data.pkl is not one tensor: " + py_repr(*v));
  const PyObj& id = *args[0]->items[0];
  if (id.kind != PyKind::kTuple || id.items.size() != 5 || id.items[1]->kind != PyKind::kGlobal ||
      id.items[2]->kind != PyKind::kStr || id.items[4]->kind != PyKind::kInt)
    throw bad("data.pkl's storage is not ('storage', class, key, location, numel): " + py_repr(id));
  TorchSavedTensor t;
  for (const auto& s : kStorages)
    if (id.items[1]->name == s.storage) t.dtype = s.dtype;
  const uint64_t esize = *safetensors_dtype_size(t.dtype);
  int64_t want_stride = 1, n = 1;
  for (size_t d = args[2]->items.size(); d-- > 0;) {
    const PyObj &sz = *args[2]->items[d],
                *st = d < args[3]->items.size() ? args[3]->items[d].get() : nullptr;
    if (sz.kind != PyKind::kInt || sz.i < 0 || !st || st->kind != PyKind::kInt)
      throw bad("data.pkl's size or stride is not a tuple of ints");
    if (sz.i > 1 && st->i != want_stride)
      throw bad("the tensor is not contiguous (stride " + py_repr(*args[3]) + ")");
    want_stride *= sz.i;
    n *= sz.i;
  }
  for (const auto& x : args[2]->items) t.shape.insert(t.shape.end(), x->i);
  if (args[3]->items.size() != t.shape.size()) throw bad("size and stride of different lengths");
  const int64_t offset = args[1]->i, storage_numel = id.items[4]->i;
  if (offset < 0 || storage_numel < 0 || offset > storage_numel || n > storage_numel - offset)
    throw bad(fmt::format("elements [{}, {}) outside a storage of {}", offset, offset + n,
                          storage_numel));
  data = locate("data/" + id.items[2]->s);
  if (data.size != static_cast<uint64_t>(storage_numel) * esize)
    throw bad(fmt::format("storage record of {} bytes for {} elements", data.size, storage_numel));
  t.data_offset = data.offset + static_cast<uint64_t>(offset) * esize;
  t.nbytes = static_cast<uint64_t>(n) * esize;
  return t;
}

}  // namespace fullshard
