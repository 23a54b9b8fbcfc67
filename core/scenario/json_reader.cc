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
#include "core/common/json_file.h"

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

}  // namespace

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string index_path(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

namespace {

// NOTE [Bounded show]: a message shows at most kMaxShown characters of a value, so only that
// much is rendered: a 200 MB array or string costs no more than a small one, and a value
// nested deeper than the parser allows (built in code) stops at kMaxJsonDepth levels.
void render_prefix(const json& v, std::string& out, size_t depth) {
  constexpr size_t kEnough = kMaxShown + 1;
  if (out.size() >= kEnough) return;
  if (depth > kMaxJsonDepth) {
    out += "...";
    return;
  }
  const auto scalar = [&](const json& x) {
    out += x.dump(-1, ' ', false, json::error_handler_t::replace);
  };
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    scalar(json(str.size() > kEnough ? str.substr(0, kEnough) : str));
  } else if (v.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& e : v) {
      if (out.size() >= kEnough) return;
      if (!first) out += ',';
      first = false;
      render_prefix(e, out, depth + 1);
    }
    out += ']';
  } else if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [k, e] : v.items()) {
      if (out.size() >= kEnough) return;
      if (!first) out += ',';
      first = false;
      scalar(json(k.size() > kEnough ? k.substr(0, kEnough) : k));
      out += ':';
      render_prefix(e, out, depth + 1);
    }
    out += '}';
  } else {
    scalar(v);
  }
}

}  // namespace

std::string show(const json& v) {
  std::string s;
  render_prefix(v, s, 0);
  s = one_line(std::move(s));
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
    throw InputError(path, "is " + describe(j) + ", not an object",
                     "write an object, e.g. " + example);
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
    const std::string quoted = v.is_string() ? " (write numbers without quotes)" : "";
    throw InputError(path, "is " + describe(v) + ", not an integer", fix + quoted);
  }
  if (x < min || x > max) {
    const std::string bound =
        x < min ? "must be >= " + std::to_string(min) : "must be <= " + std::to_string(max);
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
  // NaN and infinities never come from JSON text, but values built from CSV cells or code can
  // hold them, and every comparison below is false for NaN.
  if (!std::isfinite(x))
    throw InputError(path, "is " + format_number(x) + ", not a finite number", fix);
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
    throw InputError(path, "is " + describe(v) + ", not a string",
                     "write a string, e.g. " + example);
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

json read_json_file(const std::string& path) { return read_json_input(path, "a .json file"); }

}  // namespace fullshard::json_reader
