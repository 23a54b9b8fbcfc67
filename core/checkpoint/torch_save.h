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
// zip64 end record precedes the plain one. The writer below lays out exactly these records
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

// Bytes of a torch.save archive of a contiguous tensor of safetensors dtype `dtype` (F32,
// BF16, F16) and `shape` whose elements are `data`. Throws InputError naming `where` for
// another dtype or a tensor of 4 GiB or more (zip64 records are not written yet).
std::string torch_save_archive(std::string_view dtype, const Shape& shape, std::string_view data,
                               const std::string& where);

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
