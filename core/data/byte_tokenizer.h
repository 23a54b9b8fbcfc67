#pragma once
// The byte-level tokenizer: token = byte of the UTF-8 text (vocabulary 256, no special
// tokens), what the generated corpus and nanoGPT's shakespeare_char-style runs use. A text or
// JSONL data set goes through it (core/data/token_source.h); `fullshard data tokenize` writes
// its tokens to an llm.c token file once.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fullshard {

inline constexpr int64_t kByteVocabSize = 256;

std::vector<uint32_t> byte_tokenize(std::string_view text);
// Requires every token < 256.
std::string byte_detokenize(const std::vector<uint32_t>& tokens);

}  // namespace fullshard
