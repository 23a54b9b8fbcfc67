#pragma once
// One tensor as torch.save writes it: what DCP's FileSystemWriter stores for every chunk of a
// `.distcp` file (docs/checkpoints.md, "DCP's own format").
//
// NOTE [torch.save archives]: torch.save writes a zip archive of uncompressed ("stored")
// records under one folder name ("archive" when writing to a stream, as DCP does):
// `data.pkl` (a protocol-2 pickle: torch._utils._rebuild_tensor_v2 applied to a persistent id
// ('storage', torch.FloatStorage, '0', 'cpu', numel), the storage offset, the size, the
// stride, requires_grad and an empty OrderedDict), `.format_version` ("1"),
// `.storage_alignment` ("64"), `byteorder` ("little"), `data/0` (the raw little-endian
// elements) and `version` ("3\n"). Each record's data starts at a multiple of 64 bytes from the
// archive's start: the local header's extra field "FB" is padded with 'Z's to get there. Local
// headers leave the CRC and sizes to a data descriptor after the data (flag 0x0808), and a
// zip64 end record precedes the plain one; a record of 4 GiB or more, or one that starts past
// 4 GiB, carries zip64 fields (NOTE [Zip64 records as PyTorch writes them] in
// core/checkpoint/torch_save.cc). The writer below lays out exactly these records
// (without `.data/serialization_id`, which torch.load does not need) with real CRC-32s. The
// reader takes any stored archive whose data.pkl has that shape, contiguous strides and a
// dtype fullshard computes in; a compressed record, a record outside the archive, a pickle with
// another class or a strided tensor is an InputError naming the file.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/tensor/shape.h"

namespace fullshard {

struct TorchSaveOptions {
  // A record whose size or local header offset, or a central directory whose size or offset, is
  // at least this many bytes gets zip64 fields (NOTE [Zip64 records as PyTorch writes them] in
  // core/checkpoint/torch_save.cc). PyTorch's (miniz's MZ_UINT32_MAX) by default; tests set it
  // low to write zip64 records into small archives. At most 0xffffffff.
  uint64_t zip64_threshold = 0xffffffffu;
};

// Bytes of a torch.save archive of a contiguous tensor of safetensors dtype `dtype` (F32,
// BF16, F16) and `shape` whose elements are `data`, of any size. Throws InputError naming
// `where` for another dtype.
std::string torch_save_archive(std::string_view dtype, const Shape& shape, std::string_view data,
                               const std::string& where, const TorchSaveOptions& options = {});

// The same archive around its data, for a writer that streams the data instead of copying it:
// head + data + tail == torch_save_archive(dtype, shape, data, ...) when `data_size` is
// data.size() and `data_crc` is crc32(data).
struct TorchSaveParts {
  std::string head, tail;
};
TorchSaveParts torch_save_archive_parts(std::string_view dtype, const Shape& shape,
                                        uint64_t data_size, uint32_t data_crc,
                                        const std::string& where,
                                        const TorchSaveOptions& options = {});

struct PyObj;
// Bytes of torch.save(v) for a Python value without tensors (DCP's BytesStorageMetadata
// entries: DefaultSavePlanner torch.saves each non-tensor value of the state dict into a
// BytesIO, and dcp.load torch.loads it): data.pkl and the same small records, no data/.
std::string torch_save_object(const PyObj& v);

struct TorchSavedTensor {
  std::string dtype;  // safetensors name
  Shape shape;
  uint64_t data_offset = 0;  // of the first element, from the archive's start
  uint64_t nbytes = 0;       // numel x element size
};

// Reads `n` bytes at `offset` (from the archive's start) into `dst`; throws on a short read.
using ArchiveReader = std::function<void(uint64_t offset, uint64_t n, void* dst)>;

// Parses the archive of `length` bytes that `read` reads (NOTE [torch.save archives]).
// `source` names the file (and offset) in errors.
TorchSavedTensor parse_torch_save(const ArchiveReader& read, uint64_t length,
                                  const std::string& source);

uint32_t crc32(std::string_view data, uint32_t crc = 0);

}  // namespace fullshard
