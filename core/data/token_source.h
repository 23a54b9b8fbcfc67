#pragma once
// A training data set as one stream of token ids: token files (core/data/token_file.h), a
// folder or glob of shards read as their concatenation in sorted name order, or text / JSONL
// through the byte-level tokenizer (core/data/byte_tokenizer.h). kLoadBatch reads sequences out
// of it (core/data/text_corpus.h, NOTE [Token data sampling]).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/data/token_file.h"

namespace fullshard {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t size() const = 0;  // tokens
  // Tokens [offset, offset + n) as int64; requires offset + n <= size().
  virtual void read(int64_t offset, int64_t n, int64_t* out) const = 0;
  // Checks every token is below `vocab_size`; throws InputError (where: `where`) naming the
  // file, the token offset and the value otherwise.
  virtual void check_vocab(int64_t vocab_size, const std::string& where) const = 0;
  // One line for logs: "3 files, 1,234,567 uint16 tokens".
  virtual std::string describe() const = 0;
};

// How a data path is read (training.data.format).
enum class DataFormat : uint8_t {
  kAuto,  // by extension: .txt -> text, .jsonl -> jsonl, anything else a token file (llm.c header)
  kLlmc,  // token files with llm.c's header
  kUInt16,  // headerless uint16 (nanoGPT)
  kUInt32,  // headerless uint32
  kText,    // UTF-8 text through the tokenizer
  kJsonl,   // one JSON object per line, its "text" field through the tokenizer
};
const char* data_format_name(DataFormat f);
// The format a name (data_format_name) spells; kAuto for any other.
DataFormat data_format_from_name(const std::string& name);

// Special tokens around every JSONL document, by name: unset = the tokenizer's default
// (<|endoftext|> before each for GPT-2, <|begin_of_text|> for Llama 3, as llm.c's fineweb.py
// writes them), "" = none. `where_bos` / `where_eos` name the options in errors.
struct DocumentTokens {
  std::optional<std::string> bos, eos;
  std::string where_bos = "--bos", where_eos = "--eos";
};

// How text becomes tokens: the byte-level tokenizer, or a byte-level BPE from a tiktoken file
// or a Hugging Face tokenizer.json (core/data/bpe_tokenizer.h, core/data/hf_tokenizer.h).
struct TextTokenizer {
  std::string name;  // "byte", or the tokenizer file
  std::string kind =
      "byte tokenizer";  // for messages: or "BPE tokenizer (GPT-2 pre-tokenizer)", ...
  int64_t vocab_size = 256;
  std::function<std::vector<uint32_t>(std::string_view text, const std::string& where)> encode;
  std::optional<uint32_t> bos,
      eos;  // before / after every JSONL document; neither: documents joined by "\n"
};
// `spec`: "byte", a tokenizer.json (ends in .json) or a tiktoken ranks file (gpt2.tiktoken,
// Llama 3's tokenizer.model). Throws InputError (where; doc.where_* for an unknown token name).
TextTokenizer make_text_tokenizer(const std::string& spec, const std::string& where,
                                  const DocumentTokens& doc = {});

// The files a data path names, sorted: a file; a folder (its regular files not starting with
// '.'); or a glob pattern (*, ?, [...]). Throws InputError (where) when it names nothing.
std::vector<std::string> expand_data_path(const std::string& path, const std::string& where);

// Opens `path` (file, folder or glob) as one token stream. Token files are mapped, never
// loaded; text and JSONL are tokenized into memory (at most kMaxInputFileBytes per file; for
// more, `fullshard data tokenize` writes a token file once). Throws InputError (where).
// Text and JSONL go through `tokenizer` (null: the byte-level one).
std::shared_ptr<const TokenSource> open_token_source(const std::string& path, DataFormat format,
                                                     const std::string& where,
                                                     const TextTokenizer* tokenizer = nullptr);

// Tokens in memory (text through a tokenizer), named `name` in errors.
std::shared_ptr<const TokenSource> tokens_in_memory(std::vector<uint32_t> tokens, std::string name);

}  // namespace fullshard
