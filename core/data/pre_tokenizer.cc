#include "core/data/pre_tokenizer.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/common/error.h"

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
  const auto n =
      static_cast<int32_t>(std::min<size_t>(text.size(), std::numeric_limits<int32_t>::max()));
  if (text.size() > static_cast<size_t>(n))
    throw InputError(where,
                     "text of " + std::to_string(text.size()) + " bytes is too long for one piece",
                     "split the text");
  int32_t i = 0;
  while (i < n) {
    Char c;
    c.begin = static_cast<size_t>(i);
    U8_NEXT(s, i, n, c.cp);
    if (c.cp < 0)
      throw InputError(where, fmt::format("is not UTF-8 at byte {}", c.begin),
                       "give UTF-8 text (or use --tokenizer byte)");
    c.end = static_cast<size_t>(i);
    c.cls = class_of(c.cp);
    out.push_back(c);
  }
  return out;
}

// The pieces of `text` that `piece_end(c, i)` (one past the last character of the piece starting
// at character i) cuts.
template <typename PieceEnd>
std::vector<std::string_view> split(std::string_view text, const std::string& where,
                                    PieceEnd piece_end) {
  const std::vector<Char> c = decode_utf8(text, where);
  std::vector<std::string_view> pieces;
  size_t i = 0;
  while (i < c.size()) {
    size_t end = piece_end(c, i);
    if (end <= i) end = i + 1;  // unreachable: every character is in one class
    pieces.push_back(text.substr(c[i].begin, c[end - 1].end - c[i].begin));
    i = end;
  }
  return pieces;
}

// End of the run of `cls` starting at `from`.
size_t run(const std::vector<Char>& c, size_t from, CharClass cls) {
  size_t j = from;
  while (j < c.size() && c[j].cls == cls) ++j;
  return j;
}

bool is_line_break(UChar32 cp) { return cp == '\r' || cp == '\n'; }

// Simple case folding of the letters Llama 3's contractions name ((?i:...)): only U+017F
// (long s) folds onto one of them besides the upper-case ASCII letters.
UChar32 fold(UChar32 cp) {
  if (cp == 0x17F) return 's';
  return cp >= 'A' && cp <= 'Z' ? cp + ('a' - 'A') : cp;
}

size_t gpt2_piece_end(const std::vector<Char>& c, size_t i) {
  const size_t n = c.size();
  const bool space_first = c[i].cp == ' ' && i + 1 < n;
  // '(?:[sdmt]|ll|ve|re)
  if (c[i].cp == '\'' && i + 1 < n) {
    const UChar32 a = c[i + 1].cp, b = i + 2 < n ? c[i + 2].cp : 0;
    if (a == 's' || a == 'd' || a == 'm' || a == 't') return i + 2;
    if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e')) return i + 3;
  }
  // ' ?\p{L}++', ' ?\p{N}++', ' ?[^\s\p{L}\p{N}]++'
  for (CharClass cls : {CharClass::kLetter, CharClass::kNumber, CharClass::kOther}) {
    if (c[i].cls == cls) return run(c, i, cls);
    if (space_first && c[i + 1].cls == cls) return run(c, i + 1, cls);
  }
  const size_t j = run(c, i, CharClass::kSpace);
  if (j == n) return n;          // \s++$
  if (j - i >= 2) return j - 1;  // \s+(?!\S): leave the last space to the next piece
  return i + 1;                  // \s
}

size_t llama3_piece_end(const std::vector<Char>& c, size_t i) {
  const size_t n = c.size();
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c[i].cp == '\'' && i + 1 < n) {
    const UChar32 a = fold(c[i + 1].cp), b = i + 2 < n ? fold(c[i + 2].cp) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  const bool lead =
      c[i].cls != CharClass::kLetter && c[i].cls != CharClass::kNumber && !is_line_break(c[i].cp);
  if (lead && i + 1 < n && c[i + 1].cls == CharClass::kLetter)
    return run(c, i + 1, CharClass::kLetter);
  if (c[i].cls == CharClass::kLetter) return run(c, i, CharClass::kLetter);
  // \p{N}{1,3}
  if (c[i].cls == CharClass::kNumber) return std::min(run(c, i, CharClass::kNumber), i + 3);
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t s = n;
  if (c[i].cls == CharClass::kOther)
    s = i;
  else if (c[i].cp == ' ' && i + 1 < n && c[i + 1].cls == CharClass::kOther)
    s = i + 1;
  if (s < n) {
    size_t end = run(c, s, CharClass::kOther);
    while (end < n && is_line_break(c[end].cp)) ++end;
    return end;
  }
  // c[i] is white space from here on.
  const size_t j = run(c, i, CharClass::kSpace);
  // \s*[\r\n]+: up to the run's last line break
  for (size_t p = j; p > i; --p)
    if (is_line_break(c[p - 1].cp)) return p;
  if (j == n) return n;          // \s+(?!\S) at the end of the text
  if (j - i >= 2) return j - 1;  // \s+(?!\S): leave the last space to the next piece
  return j;                      // \s+
}

}  // namespace

const char* pre_tokenizer_name(PreTokenizer p) {
  return p == PreTokenizer::kGpt2 ? "GPT-2" : "Llama 3";
}

std::vector<std::string_view> split_gpt2(std::string_view text, const std::string& where) {
  return split(text, where, gpt2_piece_end);
}

std::vector<std::string_view> split_llama3(std::string_view text, const std::string& where) {
  return split(text, where, llama3_piece_end);
}

std::vector<std::string_view> pre_tokenize(PreTokenizer p, std::string_view text,
                                           const std::string& where) {
  return p == PreTokenizer::kGpt2 ? split_gpt2(text, where) : split_llama3(text, where);
}

}  // namespace fullshard
