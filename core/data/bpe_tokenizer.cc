#include "core/data/bpe_tokenizer.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "core/common/error.h"
#include "core/common/input_file.h"

namespace fullshard {
namespace {

int base64_value(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  if (ch >= '0' && ch <= '9') return ch - '0' + 52;
  if (ch == '+') return 62;
  if (ch == '/') return 63;
  return -1;
}

bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char ch = in[i + static_cast<size_t>(k)];
      if (ch == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if (pad > 0 || (v[k] = base64_value(ch)) < 0) {
        return false;
      }
    }
    const uint32_t w = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) |
                       (static_cast<uint32_t>(v[2]) << 6) | static_cast<uint32_t>(v[3]);
    out += static_cast<char>(w >> 16);
    if (pad < 2) out += static_cast<char>((w >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(w & 0xff);
  }
  return true;
}

// Llama 3's tokenizer.model holds 128,000 ranks; Meta's tokenizer.py adds 256 special tokens
// after them. These are the ones Llama 3 and 3.1 name alike (the reserved ones differ).
constexpr uint32_t kLlama3Ranks = 128000;
constexpr int64_t kLlama3VocabSize = 128256;

}  // namespace

BpeTokenizer::BpeTokenizer(BpeModel model) : m_(std::move(model)) {
  for (int b = 0; b < 256; ++b)
    FULLSHARD_CHECK(m_.vocab.count(std::string(1, static_cast<char>(b))),
                    "BPE vocabulary without byte " + std::to_string(b));
  int64_t n = m_.min_vocab_size;
  for (const auto& [bytes, id] : m_.vocab) n = std::max<int64_t>(n, int64_t{id} + 1);
  for (const auto& [name, id] : m_.special_tokens) n = std::max<int64_t>(n, int64_t{id} + 1);
  vocab_size_ = n;
  FULLSHARD_CHECK(m_.document_start.empty() || special(m_.document_start),
                  "document start is not a special token");
}

BpeTokenizer BpeTokenizer::from_tiktoken_file(const std::string& path, const std::string& where,
                                              std::optional<PreTokenizer> pre) {
  const std::string text =
      read_input_file(path, "a tiktoken ranks file (gpt2.tiktoken, Llama 3's tokenizer.model)");
  BpeModel m;
  auto& ranks = m.vocab;
  std::vector<bool> seen;
  std::istringstream in(text);
  std::string line, bytes;
  size_t line_no = 0;
  const std::string fix =
      "give a tiktoken file: one \"base64-token rank\" per line (e.g. gpt2.tiktoken)";
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    const std::string at = fmt::format("'{}' line {}", path, line_no);
    if (sp == std::string::npos || !base64_decode(std::string_view(line).substr(0, sp), bytes))
      throw InputError(where, at + " is not \"base64-token rank\"", fix);
    char* endp = nullptr;
    const std::string num = line.substr(sp + 1);
    const unsigned long long r = std::strtoull(num.c_str(), &endp, 10);
    if (num.empty() || *endp != '\0' || r >= (1ull << 31))
      throw InputError(where, at + " has rank '" + num + "', not an integer below 2^31", fix);
    if (r >= seen.size()) seen.resize(r + 1, false);
    if (seen[r] || !ranks.emplace(bytes, static_cast<uint32_t>(r)).second)
      throw InputError(where, at + " repeats a rank or a token", fix);
    seen[r] = true;
  }
  for (size_t r = 0; r < seen.size(); ++r)
    if (!seen[r])
      throw InputError(where, fmt::format("'{}' has no token of rank {}", path, r),
                       "ranks must be 0 .. n-1");
  for (int b = 0; b < 256; ++b)
    if (!ranks.count(std::string(1, static_cast<char>(b))))
      throw InputError(where, fmt::format("'{}' has no token for byte {}", path, b),
                       "every byte needs a rank (" + fix + ")");
  const auto n = static_cast<uint32_t>(ranks.size());
  m.pre_tokenizer = pre.value_or(n == kLlama3Ranks ? PreTokenizer::kLlama3 : PreTokenizer::kGpt2);
  if (m.pre_tokenizer == PreTokenizer::kLlama3) {
    m.special_tokens = {{"<|begin_of_text|>", n},
                        {"<|end_of_text|>", n + 1},
                        {"<|start_header_id|>", n + 6},
                        {"<|end_header_id|>", n + 7},
                        {"<|eot_id|>", n + 9}};
    m.document_start = "<|begin_of_text|>";  // llm.c's fineweb.py for Llama 3
    m.min_vocab_size = int64_t{n} + (kLlama3VocabSize - kLlama3Ranks);
  } else {
    m.special_tokens = {{"<|endoftext|>", n}};  // GPT-2: 50256
    m.document_start = "<|endoftext|>";         // llm.c's fineweb.py for GPT-2
  }
  return BpeTokenizer(std::move(m));
}

std::optional<uint32_t> BpeTokenizer::special(const std::string& name) const {
  for (const auto& [s, id] : m_.special_tokens)
    if (s == name) return id;
  return std::nullopt;
}

std::optional<uint32_t> BpeTokenizer::merge_rank(const std::string& a, const std::string& b) const {
  if (m_.merges.empty()) {
    auto it = m_.vocab.find(a + b);
    if (it == m_.vocab.end()) return std::nullopt;
    return it->second;
  }
  const uint64_t key = (uint64_t{m_.vocab.at(a)} << 32) | m_.vocab.at(b);
  auto it = m_.merges.find(key);
  if (it == m_.merges.end()) return std::nullopt;
  return it->second;
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  if (m_.ignore_merges)
    if (auto it = m_.vocab.find(std::string(piece)); it != m_.vocab.end()) {
      out.push_back(it->second);
      return;
    }
  // Parts start as single bytes; merge the adjacent pair of lowest rank (the leftmost on a tie)
  // until no pair merges (NOTE [Two merge rules]).
  std::vector<std::string> parts;
  for (char ch : piece) parts.emplace_back(1, ch);
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  while (parts.size() > 1) {
    uint32_t best = kNone;
    size_t at = 0;
    for (size_t k = 0; k + 1 < parts.size(); ++k)
      if (auto r = merge_rank(parts[k], parts[k + 1]); r && *r < best) best = *r, at = k;
    if (best == kNone) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  for (const auto& p : parts) out.push_back(m_.vocab.at(p));
}

std::vector<uint32_t> BpeTokenizer::encode(std::string_view text, const std::string& where) const {
  std::vector<uint32_t> out;
  for (std::string_view piece : pre_tokenize(m_.pre_tokenizer, text, where))
    encode_piece(piece, out);
  return out;
}

}  // namespace fullshard
