#include "core/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/common/error.h"
#include "core/common/output_file.h"

namespace fullshard {
namespace {

int32_t read_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);  // little-endian hosts only (x86-64, aarch64): the format is little-endian
  return v;
}

int64_t dtype_bytes(TokenDType d) { return d == TokenDType::kUInt16 ? 2 : 4; }

}  // namespace

const char* token_dtype_name(TokenDType d) {
  return d == TokenDType::kUInt16 ? "uint16" : "uint32";
}

const char* token_file_format_name(TokenFileFormat f) {
  switch (f) {
    case TokenFileFormat::kAuto: return "auto";
    case TokenFileFormat::kLlmc: return "llmc";
    case TokenFileFormat::kUInt16: return "uint16";
    case TokenFileFormat::kUInt32: return "uint32";
  }
  return "?";
}

TokenFile::TokenFile(const std::string& path, TokenFileFormat format, const std::string& where)
    : path_(path) {
  const std::string q = "'" + path + "'";
  // O_NONBLOCK: a FIFO must not block the open (NOTE [Input files]).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    throw InputError(where, q + " cannot be opened: " + std::strerror(errno),
                     "give an existing token file (fullshard data tokenize writes one)");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(where, q + " is not a regular file",
                     "give a token file, a folder of them or a glob");
  }
  map_bytes_ = static_cast<size_t>(st.st_size);
  if (map_bytes_ > 0) {
    void* m = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw InputError(where, q + " cannot be mapped: " + std::strerror(err),
                       "give a readable token file");
    }
    map_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  try {
    const bool magic =
        map_bytes_ >= 4 && (read_i32(map_) == kLlmcMagicU16 || read_i32(map_) == kLlmcMagicU32);
    if (format == TokenFileFormat::kAuto && !magic)
      throw InputError(where,
                       q + " does not start with an llm.c header (magic 20240520 or 20240801)",
                       "for a headerless file (nanoGPT's train.bin) give training.data.format "
                       "\"uint16\" or \"uint32\"");
    if (format == TokenFileFormat::kLlmc || format == TokenFileFormat::kAuto) {
      if (map_bytes_ < static_cast<size_t>(kLlmcHeaderBytes) || !magic)
        throw InputError(
            where, q + " has no llm.c header (256 int32, magic 20240520 or 20240801)",
            "give training.data.format \"uint16\" or \"uint32\" for a headerless file");
      const int32_t m = read_i32(map_), version = read_i32(map_ + 4), count = read_i32(map_ + 8);
      dtype_ = m == kLlmcMagicU16 ? TokenDType::kUInt16 : TokenDType::kUInt32;
      const int32_t want = m == kLlmcMagicU16 ? 1 : 7;
      if (version != want)
        throw InputError(where,
                         q + " has llm.c magic " + std::to_string(m) + " but version " +
                             std::to_string(version) + " (expected " + std::to_string(want) + ")",
                         "rewrite the file with llm.c's write_datafile or fullshard data tokenize");
      header_ = true;
      count_ = count;
      const int64_t expect = kLlmcHeaderBytes + static_cast<int64_t>(count) * dtype_bytes(dtype_);
      if (count < 0 || expect != static_cast<int64_t>(map_bytes_))
        throw InputError(where,
                         q + " has " + std::to_string(map_bytes_) + " bytes but its header says " +
                             std::to_string(count) + " " + token_dtype_name(dtype_) + " tokens (" +
                             std::to_string(expect) + " bytes)",
                         "the file is cut or padded: write it again");
      tokens_ = map_ + kLlmcHeaderBytes;
    } else {
      dtype_ = format == TokenFileFormat::kUInt16 ? TokenDType::kUInt16 : TokenDType::kUInt32;
      if (magic)
        throw InputError(where,
                         q + " starts with an llm.c header but training.data.format is \"" +
                             token_file_format_name(format) + "\"",
                         "give training.data.format \"llmc\" (or \"auto\")");
      if (map_bytes_ % static_cast<size_t>(dtype_bytes(dtype_)) != 0)
        throw InputError(where,
                         q + " has " + std::to_string(map_bytes_) +
                             " bytes, not a whole number of " + token_dtype_name(dtype_) +
                             " tokens",
                         "check training.data.format (the file's dtype) or rewrite the file");
      count_ = static_cast<int64_t>(map_bytes_) / dtype_bytes(dtype_);
      tokens_ = map_;
    }
  } catch (...) {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
    throw;
  }
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
}

uint32_t TokenFile::token(int64_t i) const {
  FULLSHARD_CHECK(i >= 0 && i < count_, "token index out of range");
  if (dtype_ == TokenDType::kUInt16) {
    uint16_t v;
    std::memcpy(&v, tokens_ + 2 * i, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, tokens_ + 4 * i, 4);
  return v;
}

void TokenFile::read(int64_t offset, int64_t n, int64_t* out) const {
  FULLSHARD_CHECK(offset >= 0 && n >= 0 && offset + n <= count_, "token range out of the file");
  for (int64_t i = 0; i < n; ++i) out[i] = token(offset + i);
}

int64_t TokenFile::first_token_at_least(uint32_t vocab_size) const {
  for (int64_t i = 0; i < count_; ++i)
    if (token(i) >= vocab_size) return i;
  return -1;
}

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens,
                      TokenDType dtype, bool header, const std::string& flag) {
  const uint32_t limit = dtype == TokenDType::kUInt16 ? 0xffffu : 0xffffffffu;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] > limit)
      throw InputError(flag,
                       "token " + std::to_string(tokens[i]) + " at offset " + std::to_string(i) +
                           " does not fit uint16",
                       "write uint32 tokens (a vocabulary above 65,536)");
  if (header && tokens.size() > static_cast<size_t>(INT32_MAX))
    throw InputError(
        flag, std::to_string(tokens.size()) + " tokens do not fit an llm.c header's int32 count",
        "split the tokens into shards");
  std::string bytes;
  if (header) {
    std::vector<int32_t> h(256, 0);
    h[0] = dtype == TokenDType::kUInt16 ? kLlmcMagicU16 : kLlmcMagicU32;
    h[1] = dtype == TokenDType::kUInt16 ? 1 : 7;
    h[2] = static_cast<int32_t>(tokens.size());
    bytes.append(reinterpret_cast<const char*>(h.data()), h.size() * 4);
  }
  bytes.reserve(bytes.size() + tokens.size() * static_cast<size_t>(dtype_bytes(dtype)));
  for (uint32_t t : tokens) {
    if (dtype == TokenDType::kUInt16) {
      const auto v = static_cast<uint16_t>(t);
      bytes.append(reinterpret_cast<const char*>(&v), 2);
    } else {
      bytes.append(reinterpret_cast<const char*>(&t), 4);
    }
  }
  write_output_file(path, bytes, flag);
}

}  // namespace fullshard
