#include "core/common/json_file.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/common/error.h"
#include "core/common/input_file.h"

namespace fullshard {
namespace {

using nlohmann::json;

std::string child(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}
std::string element(const std::string& parent, size_t i) {
  return parent + "[" + std::to_string(i) + "]";
}

// 1-based line and column of byte `idx` of `text`.
std::pair<size_t, size_t> line_column(const std::string& text, size_t idx) {
  idx = std::min(idx, text.size());
  const size_t line = 1 + static_cast<size_t>(std::count(
                              text.begin(), text.begin() + static_cast<long>(idx), '\n'));
  const size_t nl = idx == 0 ? std::string::npos : text.rfind('\n', idx - 1);
  const size_t column = nl == std::string::npos ? idx + 1 : idx - nl;
  return {line, column};
}

std::string at(const std::string& source, const std::string& text, size_t idx) {
  const auto [line, column] = line_column(text, idx);
  return source + ":" + std::to_string(line) + ":" + std::to_string(column);
}

// NOTE [Bounded JSON nesting] (json_file.h): a linear scan, before nlohmann sees the text, for the
// first
// '[' or '{' (outside strings) that opens level kMaxJsonDepth + 1. Malformed text is left to
// the parser, which reports it with its position.
std::optional<size_t> too_deep_at(const std::string& text) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

// nlohmann::json keeps the last of two equal keys silently; a SAX pass finds them first so
// that `"seq_len": 4096, ..., "seq_len": 8192` is an error instead of a surprise.
class DuplicateKeyFinder : public nlohmann::json_sax<json> {
 public:
  std::optional<std::string> duplicate_path;
  std::optional<std::pair<size_t, std::string>> syntax_error;  // byte position, message

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override {
    frames_.push_back({true, {}, {}, 0});
    return true;
  }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    if (!f.keys.insert(k).second) {
      duplicate_path = child(path_of_top(), k);
      return false;
    }
    f.key = k;
    return true;
  }
  bool end_object() override {
    frames_.pop_back();
    return value();
  }
  bool start_array(std::size_t) override {
    frames_.push_back({false, {}, {}, 0});
    return true;
  }
  bool end_array() override {
    frames_.pop_back();
    return value();
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    syntax_error = {position, ex.what()};
    return false;
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;
    size_t index;
  };
  // Called when a value completes: advances the enclosing array's index.
  bool value() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    return true;
  }
  // The path of the innermost open container.
  std::string path_of_top() const {
    std::string p;
    for (size_t i = 0; i + 1 < frames_.size(); ++i)
      p = frames_[i].object ? child(p, frames_[i].key) : element(p, frames_[i].index);
    return p;
  }
  std::vector<Frame> frames_;
};

// nlohmann reports "[json.exception.parse_error.101] parse error at line 3, column 5: syntax
// error while parsing ..."; keep the part after the position.
std::string parse_error_detail(const std::string& what) {
  const size_t at = what.find("parse error");
  const size_t colon = what.find(": ", at == std::string::npos ? 0 : at);
  if (colon != std::string::npos) return what.substr(colon + 2);
  const size_t bracket = what.find("] ");  // out_of_range.406: "number overflow parsing '1e999'"
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

}  // namespace

json parse_json_text(const std::string& text, const std::string& source) {
  // NOTE [NUL in JSON text]: nlohmann's lexer takes a NUL byte for the end of input (C strings),
  // so a file with a NUL after a complete value would parse as that value alone, silently
  // dropping whatever follows (a damaged file, or two files glued together). JSON text never
  // holds a raw NUL (inside a string it is written \u0000), so a NUL is refused.
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    throw InputError(at(source, text, nul), "malformed JSON: a NUL byte (\\x00)",
                     "JSON text has no NUL bytes (in a string write \\u0000); the file may be "
                     "damaged or binary");
  if (const auto deep = too_deep_at(text))
    throw InputError(
        at(source, text, *deep),
        "malformed JSON: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels",
        "no fullshard input needs more than a few levels of arrays and objects");
  DuplicateKeyFinder finder;
  json::sax_parse(text, &finder);
  if (finder.syntax_error) {
    // nlohmann's position is the 1-based index of the last character read.
    const size_t pos = std::min(finder.syntax_error->first, text.size());
    const size_t idx = pos == 0 ? 0 : pos - 1;
    const auto [line, column] = line_column(text, idx);
    throw InputError(
        at(source, text, idx), "malformed JSON: " + parse_error_detail(finder.syntax_error->second),
        "fix the JSON at line " + std::to_string(line) + ", column " + std::to_string(column) +
            " (JSON has no comments or trailing commas; strings need double quotes)");
  }
  if (finder.duplicate_path)
    throw InputError(source, "field '" + *finder.duplicate_path + "' appears twice",
                     "keep one of the two (JSON parsers silently keep only the last)");
  return json::parse(text);
}

json read_json_input(const std::string& path, const std::string& what) {
  return parse_json_text(read_input_file(path, what), path);
}

}  // namespace fullshard
