#include "core/common/user_text.h"

#include <fmt/format.h>

namespace fullshard {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when s[i] does not start one
// (overlong forms, surrogates and code points past U+10FFFF are invalid, as in RFC 3629).
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4;
  else
    return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(k) & 0xC0) != 0x80) return 0;
  if (c == 0xE0 && b(1) < 0xA0) return 0;  // overlong
  if (c == 0xED && b(1) > 0x9F) return 0;  // UTF-16 surrogate
  if (c == 0xF0 && b(1) < 0x90) return 0;  // overlong
  if (c == 0xF4 && b(1) > 0x8F) return 0;  // past U+10FFFF
  return n;
}

}  // namespace

std::string printable(std::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 16);
  bool cut = false;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    std::string piece;
    size_t n = utf8_length(s, i);
    if (n == 0) {
      piece = fmt::format("\\x{:02x}", c);
      n = 1;
    } else if (c == '\n') {
      piece = "\\n";
    } else if (c == '\t') {
      piece = "\\t";
    } else if (c == '\r') {
      piece = "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      piece = fmt::format("\\x{:02x}", c);
    } else if (c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) {  // C1: U+0080..U+009F
      piece = fmt::format("\\u{:04x}", static_cast<unsigned char>(s[i + 1]));
    } else {
      piece = std::string(s.substr(i, n));
    }
    if (out.size() + piece.size() > max_bytes) {
      cut = true;
      break;
    }
    out += piece;
    i += n;
  }
  if (cut) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

}  // namespace fullshard
