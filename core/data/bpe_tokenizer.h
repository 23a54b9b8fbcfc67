#pragma once
// GPT-2's byte-level BPE from a tiktoken ranks file (`gpt2.tiktoken` / `r50k_base.tiktoken`:
// one "base64(token bytes) rank" per line), as tiktoken encodes: the text is split by GPT-2's
// pre-tokenizer pattern, each piece's UTF-8 bytes are merged pairwise, lowest rank first, while
// the merged bytes are a token of the file.
//
// NOTE [GPT-2 pre-tokenizer]: tiktoken's r50k pattern is
//   '(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s
// split_gpt2() matches it by hand, alternative by alternative (the first that matches at a
// position wins, as in the regex): the contractions ('s 't 're 've 'm 'll 'd, case-sensitive);
// an optional space and a run of letters; of numbers; of other characters; a run of white space
// that reaches the end of the text; a run of white space minus its last character when a
// non-space follows (so that the space goes with the next word); one white space character.
// Letters (\p{L}), numbers (\p{N}) and white space (\s: the White_Space property) are ICU's
// Unicode classes, as Rust's regex crate (tiktoken) defines them.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fullshard {

// Splits UTF-8 `text` into GPT-2's pre-tokenizer pieces (NOTE [GPT-2 pre-tokenizer]); their
// concatenation is `text`. Throws InputError (where) at the first byte that is not UTF-8.
std::vector<std::string_view> split_gpt2(std::string_view text, const std::string& where);

class BpeTokenizer {
 public:
  // Reads a tiktoken ranks file; throws InputError (where: `where`) naming the file and line of
  // a malformed entry, a missing single byte, or a rank given twice.
  static BpeTokenizer from_tiktoken_file(const std::string& path, const std::string& where);
  // From ranks directly (tests): every single byte must have a rank.
  explicit BpeTokenizer(std::unordered_map<std::string, uint32_t> ranks);

  std::vector<uint32_t> encode(std::string_view text, const std::string& where) const;
  // The token ids of one pre-tokenizer piece.
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;
  // Tokens are ranks 0 .. n-1; GPT-2's <|endoftext|> is id n (50256), the vocabulary n + 1.
  uint32_t eot() const { return static_cast<uint32_t>(ranks_.size()); }
  int64_t vocab_size() const { return static_cast<int64_t>(ranks_.size()) + 1; }

 private:
  std::unordered_map<std::string, uint32_t> ranks_;
};

}  // namespace fullshard
