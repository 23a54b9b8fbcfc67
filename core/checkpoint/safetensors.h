#pragma once
// Reading and writing the safetensors format (Hugging Face): an 8-byte little-endian header
// length N, N bytes of JSON header, then the raw little-endian tensor data. The header maps
// each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to
// the start of the data) and may hold "__metadata__", a map of strings to strings.
//
// NOTE [Validating safetensors]: a checkpoint or a downloaded model is a file we did not
// write this run; it may be truncated (a crash during a copy), damaged or hostile. The reader
// trusts no size: the header length is bounded (kMaxSafetensorsHeaderBytes) and must fit in
// the file; every entry must have exactly the three fields, a known dtype, non-negative dims
// whose byte size does not overflow, data_offsets with begin <= end and end - begin equal to
// numel * element size; entries may not overlap and must index the data without holes up to
// the end of the file (as the format's reference implementation requires). Every violation
// is an InputError naming the file and the tensor. Data is read with pread() at validated
// offsets, so a file that shrinks while being read is an error, not a crash.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor/dtype.h"
#include "core/tensor/shape.h"

namespace fullshard {

// The reference implementation refuses headers over 100 MB; so do we.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;

// Element size of a safetensors dtype name ("F32", "BF16", "I64", ...); nullopt if unknown.
std::optional<uint64_t> safetensors_dtype_size(std::string_view dtype);
// The safetensors name of a fullshard dtype ("F32", "BF16", "F16", "U8", "I64") and back
// (nullopt for safetensors dtypes fullshard does not compute in).
std::string_view safetensors_dtype_name(DType d);
std::optional<DType> dtype_from_safetensors(std::string_view dtype);

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // safetensors name, e.g. "F32"
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data section
  uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in data order (by begin)
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length: file offset of the data section
  const SafetensorsEntry* find(std::string_view name) const;
};

// Parses and validates the header of a safetensors file of `file_size` bytes whose first
// bytes are `prefix` (at least the 8 length bytes and the header; more is ignored). `source`
// names the file in errors. Throws InputError (NOTE [Validating safetensors]).
SafetensorsHeader parse_safetensors_header(std::string_view prefix, uint64_t file_size,
                                           const std::string& source);

class SafetensorsReader {
 public:
  // Opens and validates `path` (a regular file). Throws InputError naming the path.
  explicit SafetensorsReader(std::string path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const SafetensorsHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  // The entry called `name`; throws InputError naming the file when there is none.
  const SafetensorsEntry& entry(std::string_view name) const;
  // Bytes [offset, offset + n) of tensor `name`'s data into `dst`. Throws InputError when the
  // range is outside the tensor or the file cannot be read (e.g. it shrank).
  void read(std::string_view name, uint64_t offset, uint64_t n, void* dst) const;
  std::vector<uint8_t> read_all(std::string_view name) const;

 private:
  std::string path_;
  int fd_ = -1;
  SafetensorsHeader header_;
};

// A tensor to write: its bytes (numel * element size of dtype, little-endian) are not owned.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // safetensors name
  Shape shape;
  const void* data = nullptr;
};

// The header bytes (length + JSON, padded with spaces to a multiple of 8) for `tensors`
// written in the given order. Throws InputError for a duplicate or reserved name or an
// unknown dtype (where: `flag`).
std::string safetensors_header_bytes(const std::vector<SafetensorsTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata,
                                     const std::string& flag);
// Writes a safetensors file atomically (core/common/output_file.h: temporary file, fsync,
// rename). `flag` names the option or path in errors.
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, const std::string& flag);

}  // namespace fullshard
