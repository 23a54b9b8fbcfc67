#pragma once
// Pre-tokenized token files as nanoGPT and llm.c write them: a flat little-endian array of
// uint16 or uint32 token ids, either headerless (nanoGPT's train.bin / val.bin, np.memmap of
// uint16) or after llm.c's header of 256 int32 (dev/data/data_common.py write_datafile).
//
// NOTE [llm.c token header]: header[0] is the magic, header[1] the version, header[2] the
// token count, the rest zero. Magic 20240520 is version 1 with uint16 tokens (GPT-2), magic
// 20240801 is version 7 with uint32 tokens (Llama 3). A file is read through mmap, so a
// 10 GB shard costs address space, not memory; the header's count must match the file size
// exactly (a cut or padded file is an error, not silently fewer tokens).
#include <cstdint>
#include <string>
#include <vector>

namespace fullshard {

enum class TokenDType : uint8_t { kUInt16, kUInt32 };

// How a token file is laid out: "llmc" (the header says the dtype), or headerless with the
// dtype given ("uint16", "uint32"). kAuto reads the header when the file starts with an
// llm.c magic and refuses a headerless file (its dtype cannot be told from the bytes).
enum class TokenFileFormat : uint8_t { kAuto, kLlmc, kUInt16, kUInt32 };

inline constexpr int32_t kLlmcMagicU16 = 20240520;  // version 1
inline constexpr int32_t kLlmcMagicU32 = 20240801;  // version 7
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

const char* token_dtype_name(TokenDType d);             // "uint16", "uint32"
const char* token_file_format_name(TokenFileFormat f);  // "auto", "llmc", "uint16", "uint32"

// A read-only token file mapped into memory. Throws InputError (where: `where`, e.g.
// "training.data.path") naming the file and the fix when it is missing, not a regular file,
// has a bad header, or a size that does not fit its dtype.
class TokenFile {
 public:
  TokenFile(const std::string& path, TokenFileFormat format, const std::string& where);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  TokenDType dtype() const { return dtype_; }
  bool has_header() const { return header_; }
  int64_t size() const { return count_; }  // tokens
  uint32_t token(int64_t i) const;
  // Tokens [offset, offset + n) as int64 into `out`; requires offset + n <= size().
  void read(int64_t offset, int64_t n, int64_t* out) const;
  // The first token >= `vocab_size` (its index), or -1 when every token is below it.
  int64_t first_token_at_least(uint32_t vocab_size) const;

 private:
  std::string path_;
  TokenDType dtype_ = TokenDType::kUInt16;
  bool header_ = false;
  int64_t count_ = 0;
  const uint8_t* map_ = nullptr;  // whole file
  size_t map_bytes_ = 0;
  const uint8_t* tokens_ = nullptr;
};

// Writes `tokens` to `path` atomically (core/common/output_file.h): with llm.c's header when
// `header`, else headerless. Throws InputError (where: `flag`) when a token does not fit the
// dtype or the file cannot be written.
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens,
                      TokenDType dtype, bool header, const std::string& flag);

}  // namespace fullshard
