#include "core/scenario/json_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>

#include "core/common/error.h"

namespace fullshard::json_reader {
namespace {

constexpr size_t kMaxShown = 60;

// Messages are one line: the CLI prints them as one line and tests match on them.
std::string one_line(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
  return s;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string article_type(const json& v) {
  switch (v.type()) {
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    case json::value_t::null: return "null";
    default: return "an unsupported value";
  }
}

std::string format_number(double x) {
  std::ostringstream out;
  out.precision(15);
  out << x;
  return out.str();
}

std::string range_text(int64_t min, int64_t max) {
  if (max == std::numeric_limits<int64_t>::max()) return ">= " + std::to_string(min);
  return "between " + std::to_string(min) + " and " + std::to_string(max);
}

// ---------------------------------------------------------------- duplicate keys
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
      duplicate_path = child_path(path_of_top(), k);
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
      p = frames_[i].object ? child_path(p, frames_[i].key) : index_path(p, frames_[i].index);
    return p;
  }
  std::vector<Frame> frames_;
};

// nlohmann reports "[json.exception.parse_error.101] parse error at line 3, column 5: syntax
// error while parsing ..."; keep the part after the position.
std::string parse_error_detail(const std::string& what) {
  const size_t at = what.find("parse error");
  const size_t colon = what.find(": ", at == std::string::npos ? 0 : at);
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

}  // namespace

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string index_path(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

std::string show(const json& v) {
  std::string s = one_line(v.dump(-1, ' ', false, json::error_handler_t::replace));
  if (s.size() > kMaxShown) s = s.substr(0, kMaxShown - 3) + "...";
  return s;
}

std::string describe(const json& v) {
  if (v.is_null() || v.is_boolean()) return show(v);
  return show(v) + " (" + article_type(v) + ")";
}

std::string join(const std::vector<std::string>& items, const std::string& quote,
                 const std::string& last_sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += (i + 1 == items.size()) ? last_sep : ", ";
    out += quote + items[i] + quote;
  }
  return out;
}

size_t edit_distance(const std::string& a_in, const std::string& b_in) {
  const std::string a = lower(a_in), b = lower(b_in);
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::optional<std::string> closest(const std::string& name,
                                   const std::vector<std::string>& candidates) {
  // A typo changes a few characters; allow more edits for longer names.
  // Ties go to the candidate that only adds characters ("llama3-8b" -> "llama3.1-8b" rather
  // than "llama2-7b"), then to the longer common prefix.
  const size_t allowed = name.size() <= 3 ? 1 : name.size() <= 6 ? 2 : 3;
  auto is_subsequence = [](const std::string& small, const std::string& big) {
    size_t i = 0;
    for (size_t j = 0; i < small.size() && j < big.size(); ++j)
      if (small[i] == big[j]) ++i;
    return i == small.size();
  };
  auto common_prefix = [](const std::string& a, const std::string& b) {
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    return i;
  };
  const std::string ln = lower(name);
  std::optional<std::string> best;
  std::tuple<size_t, int, long> best_score{std::numeric_limits<size_t>::max(), 0, 0};
  for (const auto& c : candidates) {
    const size_t d = edit_distance(name, c);
    if (d > allowed) continue;
    const std::string lc = lower(c);
    const std::tuple<size_t, int, long> score{d, is_subsequence(ln, lc) ? 0 : 1,
                                              -static_cast<long>(common_prefix(ln, lc))};
    if (score < best_score) {
      best = c;
      best_score = score;
    }
  }
  if (best) return best;
  // A truncated or extended name ("accum" for "grad_accum_steps"): substring match.
  const std::string n = lower(name);
  if (n.size() >= 4)
    for (const auto& c : candidates) {
      const std::string lc = lower(c);
      if (lc.find(n) != std::string::npos || n.find(lc) != std::string::npos) return c;
    }
  return std::nullopt;
}

void require_object(const json& j, const std::string& path, const std::string& example) {
  if (!j.is_object())
    throw InputError(path, "is " + describe(j) + ", not an object", "write an object, e.g. " + example);
}

void reject_unknown_fields(const json& obj, const std::string& path,
                           const std::vector<std::string>& known, const UnknownKeyHint& hint) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const std::string where = child_path(path, key);
    const std::string section = path.empty() ? "the top level" : path;
    const std::string problem = "unknown field '" + key + "' in " + section;
    const std::string known_list = section + " accepts " + join(known, "'", " and ");
    if (auto near = closest(key, known))
      throw InputError(where, problem, "did you mean '" + *near + "'? (" + known_list + ")");
    if (hint)
      if (auto h = hint(key)) throw InputError(where, problem, *h);
    throw InputError(where, problem, known_list);
  }
}

void require_field(const json& obj, const std::string& path, const std::string& key,
                   const std::string& fix) {
  if (!obj.contains(key)) throw InputError(child_path(path, key), "is missing", fix);
}

int64_t get_int(const json& v, const std::string& path, int64_t min, int64_t max,
                const std::string& example) {
  const std::string fix = "write a whole number " + range_text(min, max) + ", e.g. " + example;
  int64_t x = 0;
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    x = v.get<int64_t>();
  } else if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw InputError(path, "is " + show(v) + ", too large", fix);
    x = static_cast<int64_t>(u);
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^63 is exactly representable; anything at or past it does not fit.
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) >= 9.2233720368547758e18)
      throw InputError(path, "is " + show(v) + ", not a whole number", fix);
    x = static_cast<int64_t>(d);
  } else {
    const std::string quoted =
        v.is_string() ? " (write numbers without quotes)" : "";
    throw InputError(path, "is " + describe(v) + ", not an integer", fix + quoted);
  }
  if (x < min || x > max) {
    const std::string bound = x < min ? "must be >= " + std::to_string(min)
                                      : "must be <= " + std::to_string(max);
    throw InputError(path, "is " + show(v) + ", " + bound, fix);
  }
  return x;
}

double get_number(const json& v, const std::string& path, double min, bool min_inclusive,
                  double max, bool max_inclusive, const std::string& example) {
  std::string range;
  const bool has_max = max != std::numeric_limits<double>::infinity();
  range = (min_inclusive ? ">= " : "> ") + format_number(min);
  if (has_max) range += std::string(" and ") + (max_inclusive ? "<= " : "< ") + format_number(max);
  const std::string fix = "write a number " + range + ", e.g. " + example;
  if (!v.is_number())
    throw InputError(path, "is " + describe(v) + ", not a number",
                     fix + (v.is_string() ? " (write numbers without quotes)" : ""));
  const double x = v.get<double>();
  const bool below = min_inclusive ? x < min : x <= min;
  const bool above = has_max && (max_inclusive ? x > max : x >= max);
  if (below || above) throw InputError(path, "is " + show(v) + ", must be " + range, fix);
  return x;
}

bool get_bool(const json& v, const std::string& path) {
  if (!v.is_boolean())
    throw InputError(path, "is " + describe(v) + ", not a boolean",
                     "write true or false (without quotes)");
  return v.get<bool>();
}

std::string get_string(const json& v, const std::string& path, const std::string& example) {
  if (!v.is_string())
    throw InputError(path, "is " + describe(v) + ", not a string", "write a string, e.g. " + example);
  return v.get<std::string>();
}

std::string get_choice(const json& v, const std::string& path,
                       const std::vector<std::string>& choices) {
  const std::string options = "write one of " + join(choices, "\"");
  if (!v.is_string()) throw InputError(path, "is " + describe(v), options);
  const std::string s = v.get<std::string>();
  if (std::find(choices.begin(), choices.end(), s) != choices.end()) return s;
  if (auto near = closest(s, choices))
    throw InputError(path, "is " + show(v) + ", not a known value",
                     "did you mean \"" + *near + "\"? " + options);
  throw InputError(path, "is " + show(v) + ", not a known value", options);
}

json read_json_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw InputError(path, "file not found",
                     "check the path (relative paths are resolved from " +
                         fs::current_path(ec).string() + ")");
  if (fs::is_directory(path, ec))
    throw InputError(path, "is a directory, not a JSON file", "give the path of a .json file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot be read", "check the file's permissions");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  DuplicateKeyFinder finder;
  json::sax_parse(text, &finder);
  if (finder.syntax_error) {
    // nlohmann's position is the 1-based index of the last character read.
    const size_t pos = std::min(finder.syntax_error->first, text.size());
    const size_t idx = pos == 0 ? 0 : pos - 1;
    const size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + idx, '\n'));
    const size_t line_start = idx == 0 ? 0 : text.rfind('\n', idx - 1);
    const size_t column = line_start == std::string::npos || idx == 0 ? idx + 1 : idx - line_start;
    const std::string at = std::to_string(line) + ":" + std::to_string(column);
    throw InputError(path + ":" + at,
                     one_line("malformed JSON: " + parse_error_detail(finder.syntax_error->second)),
                     "fix the JSON at line " + std::to_string(line) + ", column " +
                         std::to_string(column) +
                         " (JSON has no comments or trailing commas; strings need double quotes)");
  }
  if (finder.duplicate_path)
    throw InputError(path, "field '" + *finder.duplicate_path + "' appears twice",
                     "keep one of the two (JSON parsers silently keep only the last)");
  return json::parse(text);
}

}  // namespace fullshard::json_reader
