#pragma once
// Byte-level BPE as tiktoken and Hugging Face tokenizers encode (GPT-2, Llama 3): the text is
// cut into pieces by the pre-tokenizer (core/data/pre_tokenizer.h), and each piece's UTF-8
// bytes are merged pairwise, lowest rank first (the leftmost on a tie), while a merge applies.
// Read from a tiktoken ranks file (this file) or a tokenizer.json (core/data/hf_tokenizer.h).
//
// NOTE [Two merge rules]: tiktoken's rule merges the adjacent pair whose concatenation is the
// token of lowest rank (the ranks are the ids). tokenizers' BPE merges the adjacent pair that
// comes first in the `merges` list, whatever other pairs spell the same bytes. They agree when
// every token has one merge, in id order (GPT-2, Llama 3), but a tokenizer.json may list merges
// in any order, so a tokenizer built from one keeps its merges and uses them. Both first look up
// the whole piece (tiktoken always; tokenizers with `ignore_merges`, as Llama 3's sets).
//
// Special tokens (<|endoftext|>, <|begin_of_text|>) are never made from text: text spelling one
// is encoded as ordinary text (tiktoken's encode_ordinary, tokenizers' split_special_tokens, as
// llm.c's fineweb.py tokenizes documents); they only go between documents (TextTokenizer).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/data/pre_tokenizer.h"

namespace fullshard {

// What a BpeTokenizer is built from (validated by the readers; the constructor checks
// invariants only).
struct BpeModel {
  std::unordered_map<std::string, uint32_t> vocab;  // token bytes -> id; every single byte has one
  // tokenizers' merges: (left id << 32 | right id) -> position in the merges list; empty:
  // tiktoken's rule (NOTE [Two merge rules]).
  std::unordered_map<uint64_t, uint32_t> merges;
  bool ignore_merges = true;  // a piece that is a token is that token
  PreTokenizer pre_tokenizer = PreTokenizer::kGpt2;
  std::vector<std::pair<std::string, uint32_t>> special_tokens;  // e.g. {"<|endoftext|>", 50256}
  std::string
      document_start;  // the special token a JSONL document starts with by default ("": none)
  int64_t min_vocab_size = 0;  // ids reserved beyond the largest (Llama 3: 256 special ids)
};

class BpeTokenizer {
 public:
  // Reads a tiktoken ranks file: one "base64(token bytes) rank" per line. The pre-tokenizer and
  // special tokens are those of the file's model: Llama 3's (NOTE [Llama 3 pre-tokenizer]; its
  // 256 special tokens from <|begin_of_text|> = 128000 on) for a file of 128,000 ranks
  // (tokenizer.model), else GPT-2's (<|endoftext|> = the number of ranks), or `pre` when given.
  // Throws InputError (where: `where`) naming the file and line of a malformed entry, a missing
  // single byte, or a rank given twice.
  static BpeTokenizer from_tiktoken_file(const std::string& path, const std::string& where,
                                         std::optional<PreTokenizer> pre = std::nullopt);
  explicit BpeTokenizer(BpeModel model);

  // Ordinary text (special tokens are not matched: NOTE [Two merge rules]).
  std::vector<uint32_t> encode(std::string_view text, const std::string& where) const;
  // The token ids of one pre-tokenizer piece.
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;

  // The id of special token `name`, if the tokenizer has it.
  std::optional<uint32_t> special(const std::string& name) const;
  const std::vector<std::pair<std::string, uint32_t>>& special_tokens() const {
    return m_.special_tokens;
  }
  const std::string& document_start() const { return m_.document_start; }
  PreTokenizer pre_tokenizer() const { return m_.pre_tokenizer; }
  // One more than the largest id (tokens and special tokens).
  int64_t vocab_size() const { return vocab_size_; }

 private:
  // The rank of merging `a` and `b` (lower first), or none.
  std::optional<uint32_t> merge_rank(const std::string& a, const std::string& b) const;

  BpeModel m_;
  int64_t vocab_size_ = 0;
};

}  // namespace fullshard
