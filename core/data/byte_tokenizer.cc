#include "core/data/byte_tokenizer.h"

#include "core/common/error.h"

namespace fullshard {

std::vector<uint32_t> byte_tokenize(std::string_view text) {
  std::vector<uint32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string byte_detokenize(const std::vector<uint32_t>& tokens) {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    FULLSHARD_CHECK(tokens[i] < kByteVocabSize, "byte_detokenize: token above 255");
    out[i] = static_cast<char>(tokens[i]);
  }
  return out;
}

}  // namespace fullshard
