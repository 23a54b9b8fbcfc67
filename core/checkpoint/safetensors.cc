#include "core/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "core/common/error.h"
#include "core/common/json_file.h"
#include "core/common/output_file.h"

namespace fullshard {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; so is every host fullshard runs on");

constexpr std::pair<std::string_view, uint64_t> kDTypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};

const std::string kFix =
    "the file is damaged or not a safetensors file; write it again or download it again";

[[noreturn]] void bad(const std::string& source, const std::string& what,
                      const std::string& problem) {
  throw InputError(source + (what.empty() ? "" : ": " + what), problem, kFix);
}

uint64_t read_le64(std::string_view p) {
  uint64_t v = 0;
  std::memcpy(&v, p.data(), 8);
  return v;
}

// A non-negative integer that fits in uint64 (JSON numbers may be floats, negative or huge).
std::optional<uint64_t> as_u64(const nlohmann::json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0)
    return static_cast<uint64_t>(j.get<int64_t>());
  return std::nullopt;
}

SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& v,
                             const std::string& source) {
  const std::string where = "tensor '" + name + "'";
  if (!v.is_object())
    bad(source, where, "header entry is " + std::string(v.type_name()) + ", not an object");
  for (const auto& [k, _] : v.items())
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      bad(source, where, "unknown header field '" + k + "'");
  for (const char* k : {"dtype", "shape", "data_offsets"})
    if (!v.contains(k)) bad(source, where, std::string("header entry has no '") + k + "'");
  SafetensorsEntry e;
  e.name = name;
  if (!v["dtype"].is_string()) bad(source, where, "dtype is not a string");
  e.dtype = v["dtype"].get<std::string>();
  const auto esize = safetensors_dtype_size(e.dtype);
  if (!esize)
    bad(source, where, "unknown dtype '" + e.dtype + "' (expected F32, F16, BF16, I64, ...)");
  if (!v["shape"].is_array()) bad(source, where, "shape is not an array");
  if (v["shape"].size() > 64)
    bad(source, where, "shape has " + std::to_string(v["shape"].size()) + " dims");
  uint64_t bytes = *esize;
  for (const auto& d : v["shape"]) {
    const auto n = as_u64(d);
    if (!n || *n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad(source, where,
          "shape " + v["shape"].dump() + " holds " + d.dump() + ", not a dimension >= 0");
    e.shape.push_back(static_cast<int64_t>(*n));
    if (*n != 0 && bytes > std::numeric_limits<uint64_t>::max() / *n)
      bad(source, where, "shape " + v["shape"].dump() + " is too large (bytes overflow 64 bits)");
    bytes *= *n;
  }
  const auto& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !as_u64(off[0]) || !as_u64(off[1]))
    bad(source, where, "data_offsets " + off.dump() + " is not [begin, end] with integers >= 0");
  e.begin = as_u64(off[0]).value_or(0);
  e.end = as_u64(off[1]).value_or(0);
  if (e.begin > e.end) bad(source, where, "data_offsets " + off.dump() + " ends before it begins");
  if (e.end - e.begin != bytes)
    bad(source, where,
        "data_offsets " + off.dump() + " span " + std::to_string(e.end - e.begin) +
            " bytes but dtype " + e.dtype + " and shape " + shape_str(e.shape) + " need " +
            std::to_string(bytes));
  return e;
}

}  // namespace

std::optional<uint64_t> safetensors_dtype_size(std::string_view dtype) {
  for (const auto& [n, s] : kDTypes)
    if (n == dtype) return s;
  return std::nullopt;
}

std::string_view safetensors_dtype_name(DType d) {
  switch (d) {
    case DType::kFloat32: return "F32";
    case DType::kBFloat16: return "BF16";
    case DType::kFloat16: return "F16";
    case DType::kUInt8: return "U8";
    case DType::kInt64: return "I64";
    case DType::kFloat8E4M3FN: return "F8_E4M3";
    case DType::kFloat8E5M2: return "F8_E5M2";
  }
  return "?";
}

std::optional<DType> dtype_from_safetensors(std::string_view dtype) {
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kUInt8, DType::kInt64})
    if (safetensors_dtype_name(d) == dtype) return d;
  return std::nullopt;
}

const SafetensorsEntry* SafetensorsHeader::find(std::string_view name) const {
  for (const auto& e : tensors)
    if (e.name == name) return &e;
  return nullptr;
}

SafetensorsHeader parse_safetensors_header(std::string_view prefix, uint64_t file_size,
                                           const std::string& source) {
  if (file_size < 8 || prefix.size() < 8)
    bad(source, "",
        "file has " + std::to_string(file_size) + " bytes, fewer than the 8-byte header length");
  const uint64_t n = read_le64(prefix);
  if (n > kMaxSafetensorsHeaderBytes)
    bad(source, "",
        "header length " + std::to_string(n) + " is over the " +
            std::to_string(kMaxSafetensorsHeaderBytes) + "-byte limit");
  if (n > file_size - 8)
    bad(source, "",
        "header length " + std::to_string(n) + " is past the end of the " +
            std::to_string(file_size) + "-byte file (truncated?)");
  if (prefix.size() < 8 + n) bad(source, "", "header was not fully read");
  const std::string text(prefix.substr(8, n));
  if (text.empty() || text[0] != '{') bad(source, "", "header does not start with '{'");
  nlohmann::json j;
  try {
    j = parse_json_text(text, source + " header");
  } catch (const InputError& e) {
    bad(source, "", std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) bad(source, "", "header is not a JSON object");
  SafetensorsHeader h;
  h.data_start = 8 + n;
  for (const auto& [k, v] : j.items()) {
    if (k == "__metadata__") {
      if (!v.is_object()) bad(source, "__metadata__", "is not an object of strings");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string())
          bad(source, "__metadata__." + mk, "is " + std::string(mv.type_name()) + ", not a string");
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(k, v, source));
  }
  // Sort by (begin, end): zero-byte tensors may share an offset with their neighbour.
  std::stable_sort(h.tensors.begin(), h.tensors.end(),
                   [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  const uint64_t data_bytes = file_size - h.data_start;
  uint64_t pos = 0;
  for (const auto& e : h.tensors) {
    const std::string where = "tensor '" + e.name + "'";
    if (e.begin < pos)
      bad(source, where,
          "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
              "] overlap another tensor's bytes (which end at " + std::to_string(pos) + ")");
    if (e.begin > pos)
      bad(source, where,
          "data_offsets begin at " + std::to_string(e.begin) + ", leaving a hole after byte " +
              std::to_string(pos) + " of the data");
    if (e.end > data_bytes)
      bad(source, where,
          "data_offsets end at " + std::to_string(e.end) + ", past the " +
              std::to_string(data_bytes) + " data bytes in the file (truncated?)");
    pos = e.end;
  }
  if (pos != data_bytes)
    bad(source, "",
        "the file has " + std::to_string(data_bytes - pos) + " bytes after the last tensor's data");
  return h;
}

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0)
    throw InputError(path_, std::strerror(errno), "give the path of a .safetensors file");
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(path_, "is not a regular file", "give the path of a .safetensors file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  std::string prefix(std::min<uint64_t>(size, 8), '\0');
  auto pread_all = [&](char* dst, uint64_t n, uint64_t off) {
    uint64_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, dst + done, n - done, static_cast<off_t>(off + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      done += static_cast<uint64_t>(r);
    }
    return true;
  };
  try {
    if (!pread_all(prefix.data(), prefix.size(), 0))
      bad(path_, "", "cannot read the header length");
    if (size >= 8) {
      const uint64_t n = read_le64(prefix);
      if (n <= kMaxSafetensorsHeaderBytes && n <= size - 8) {
        prefix.resize(8 + n);
        if (!pread_all(prefix.data() + 8, n, 8)) bad(path_, "", "cannot read the header");
      }
    }
    header_ = parse_safetensors_header(prefix, size, path_);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry& SafetensorsReader::entry(std::string_view name) const {
  if (const auto* e = header_.find(name)) return *e;
  throw InputError(
      path_, "has no tensor '" + std::string(name) + "'",
      "check that the file belongs to this model (fullshard checkpoint inspect lists the tensors)");
}

void SafetensorsReader::read(std::string_view name, uint64_t offset, uint64_t n, void* dst) const {
  const SafetensorsEntry& e = entry(name);
  if (offset > e.nbytes() || n > e.nbytes() - offset)
    bad(path_, "tensor '" + std::string(name) + "'",
        "read of bytes [" + std::to_string(offset) + ", +" + std::to_string(n) +
            ") is outside its " + std::to_string(e.nbytes()) + " bytes");
  auto* out = static_cast<char*>(dst);
  uint64_t done = 0;
  const uint64_t at = header_.data_start + e.begin + offset;
  while (done < n) {
    const ssize_t r = ::pread(fd_, out + done, n - done, static_cast<off_t>(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      bad(path_, "tensor '" + std::string(name) + "'",
          std::string("read failed: ") + std::strerror(errno));
    if (r == 0)
      bad(path_, "tensor '" + std::string(name) + "'",
          "file ended inside the tensor's data (it shrank?)");
    done += static_cast<uint64_t>(r);
  }
}

std::vector<uint8_t> SafetensorsReader::read_all(std::string_view name) const {
  std::vector<uint8_t> v(entry(name).nbytes());
  read(name, 0, v.size(), v.data());
  return v;
}

std::string safetensors_header_bytes(const std::vector<SafetensorsTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata,
                                     const std::string& flag) {
  nlohmann::json j = nlohmann::json::object();
  if (!metadata.empty()) j["__metadata__"] = metadata;
  uint64_t pos = 0;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__" || t.name.empty())
      throw InputError(flag, "tensor name '" + t.name + "' is reserved", "rename the tensor");
    if (j.contains(t.name))
      throw InputError(flag, "tensor '" + t.name + "' is given twice", "give each name once");
    const auto esize = safetensors_dtype_size(t.dtype);
    if (!esize)
      throw InputError(flag, "tensor '" + t.name + "' has unknown dtype '" + t.dtype + "'",
                       "use F32, BF16, ...");
    const uint64_t bytes = static_cast<uint64_t>(numel(t.shape)) * *esize;
    j[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {pos, pos + bytes}}};
    pos += bytes;
  }
  std::string text = j.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  return out + text;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::string& flag) {
  const std::string header = safetensors_header_bytes(tensors, metadata, flag);
  OutputFile out(path, flag);
  out.write(header);
  for (const auto& t : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(numel(t.shape)) * *safetensors_dtype_size(t.dtype);
    if (bytes > 0) out.write(std::string_view(static_cast<const char*>(t.data), bytes));
  }
  out.commit();
}

}  // namespace fullshard
