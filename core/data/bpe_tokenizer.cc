#include "core/data/bpe_tokenizer.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "core/common/error.h"
#include "core/common/input_file.h"

namespace fullshard {
namespace {

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

CharClass class_of(UChar32 c) {
  if (u_isUWhiteSpace(c)) return CharClass::kSpace;
  switch (u_charType(c)) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER: return CharClass::kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER: return CharClass::kNumber;
    default: return CharClass::kOther;
  }
}

struct Char {
  size_t begin = 0, end = 0;  // byte range in the text
  UChar32 cp = 0;
  CharClass cls = CharClass::kOther;
};

std::vector<Char> decode_utf8(std::string_view text, const std::string& where) {
  std::vector<Char> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const auto n = static_cast<int32_t>(std::min<size_t>(text.size(), std::numeric_limits<int32_t>::max()));
  if (text.size() > static_cast<size_t>(n))
    throw InputError(where, "text of " + std::to_string(text.size()) + " bytes is too long for one piece", "split the text");
  int32_t i = 0;
  while (i < n) {
    Char c;
    c.begin = static_cast<size_t>(i);
    U8_NEXT(s, i, n, c.cp);
    if (c.cp < 0)
      throw InputError(where, fmt::format("is not UTF-8 at byte {}", c.begin), "give UTF-8 text (or use --tokenizer byte)");
    c.end = static_cast<size_t>(i);
    c.cls = class_of(c.cp);
    out.push_back(c);
  }
  return out;
}

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

}  // namespace

std::vector<std::string_view> split_gpt2(std::string_view text, const std::string& where) {
  const std::vector<Char> c = decode_utf8(text, where);
  std::vector<std::string_view> pieces;
  const size_t n = c.size();
  auto run = [&](size_t from, CharClass cls) {  // end of the run of `cls` starting at `from`
    size_t j = from;
    while (j < n && c[j].cls == cls) ++j;
    return j;
  };
  size_t i = 0;
  while (i < n) {
    size_t end = i;  // one past the last character of the piece
    const bool space_first = c[i].cp == ' ' && i + 1 < n;
    // '(?:[sdmt]|ll|ve|re)
    if (c[i].cp == '\'' && i + 1 < n) {
      const UChar32 a = c[i + 1].cp, b = i + 2 < n ? c[i + 2].cp : 0;
      if (a == 's' || a == 'd' || a == 'm' || a == 't')
        end = i + 2;
      else if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e'))
        end = i + 3;
    }
    // ' ?\p{L}++', ' ?\p{N}++', ' ?[^\s\p{L}\p{N}]++'
    for (CharClass cls : {CharClass::kLetter, CharClass::kNumber, CharClass::kOther}) {
      if (end != i) break;
      if (c[i].cls == cls)
        end = run(i, cls);
      else if (space_first && c[i + 1].cls == cls)
        end = run(i + 1, cls);
    }
    if (end == i && c[i].cls == CharClass::kSpace) {
      const size_t j = run(i, CharClass::kSpace);
      if (j == n)
        end = n;  // \s++$
      else if (j - i >= 2)
        end = j - 1;  // \s+(?!\S): leave the last space to the next piece
      else
        end = i + 1;  // \s
    }
    if (end == i) end = i + 1;  // unreachable: every character is in one class
    pieces.push_back(text.substr(c[i].begin, c[end - 1].end - c[i].begin));
    i = end;
  }
  return pieces;
}

BpeTokenizer::BpeTokenizer(std::unordered_map<std::string, uint32_t> ranks) : ranks_(std::move(ranks)) {
  for (int b = 0; b < 256; ++b)
    FULLSHARD_CHECK(ranks_.count(std::string(1, static_cast<char>(b))), "BPE ranks without byte " + std::to_string(b));
}

BpeTokenizer BpeTokenizer::from_tiktoken_file(const std::string& path, const std::string& where) {
  const std::string text = read_input_file(path, "a tiktoken ranks file (gpt2.tiktoken)");
  std::unordered_map<std::string, uint32_t> ranks;
  std::vector<bool> seen;
  std::istringstream in(text);
  std::string line, bytes;
  size_t line_no = 0;
  const std::string fix = "give a tiktoken file: one \"base64-token rank\" per line (e.g. gpt2.tiktoken)";
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
    if (!seen[r]) throw InputError(where, fmt::format("'{}' has no token of rank {}", path, r), "ranks must be 0 .. n-1");
  for (int b = 0; b < 256; ++b)
    if (!ranks.count(std::string(1, static_cast<char>(b))))
      throw InputError(where, fmt::format("'{}' has no token for byte {}", path, b), "every byte needs a rank (" + fix + ")");
  return BpeTokenizer(std::move(ranks));
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  if (auto it = ranks_.find(std::string(piece)); it != ranks_.end()) {
    out.push_back(it->second);
    return;
  }
  // tiktoken's byte-pair merge: parts start as single bytes; merge the adjacent pair whose
  // concatenation has the lowest rank (the leftmost on a tie) until no pair is a token.
  std::vector<std::string> parts;
  for (char ch : piece) parts.emplace_back(1, ch);
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  while (parts.size() > 1) {
    uint32_t best = kNone;
    size_t at = 0;
    for (size_t k = 0; k + 1 < parts.size(); ++k) {
      auto it = ranks_.find(parts[k] + parts[k + 1]);
      if (it != ranks_.end() && it->second < best) best = it->second, at = k;
    }
    if (best == kNone) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  for (const auto& p : parts) out.push_back(ranks_.at(p));
}

std::vector<uint32_t> BpeTokenizer::encode(std::string_view text, const std::string& where) const {
  std::vector<uint32_t> out;
  for (std::string_view piece : split_gpt2(text, where)) encode_piece(piece, out);
  return out;
}

}  // namespace fullshard
