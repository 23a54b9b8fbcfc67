#include "tools/plot/plot_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "core/common/error.h"
#include "core/common/json_file.h"
#include "core/memory/moe_memory.h"
#include "tools/plot/plot.h"

namespace fullshard::plot {

Unit byte_unit(double max_bytes) {
  if (max_bytes >= 1024.0 * 1024 * 1024) return {"GiB", 1024.0 * 1024 * 1024};
  if (max_bytes >= 1024.0 * 1024) return {"MiB", 1024.0 * 1024};
  if (max_bytes >= 1024.0) return {"KiB", 1024.0};
  return {"B", 1};
}

Unit time_unit(double span_s) {
  if (span_s >= 1) return {"s", 1};
  if (span_s >= 1e-3) return {"ms", 1e-3};
  return {"\u00b5s", 1e-6};
}

std::string format_bytes(double bytes) {
  Unit u = byte_unit(bytes);
  if (u.name == "B") return fmt::format("{:.0f} B", bytes);
  if (u.name == "GiB") return fmt::format("{:.2f} GiB", bytes / u.scale);
  return fmt::format("{:.1f} {}", bytes / u.scale, u.name);
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> out;
  if (!(hi > lo) || target < 1 || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag * (1 + 1e-9)) {
      step = m * mag;
      break;
    }
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (double v = first; v <= hi + step * 1e-9; v += step)
    out.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  return out;
}

std::string module_of(const std::string& name) {
  const size_t space = name.find(' ');
  std::string head = name.substr(0, space);
  if (head.find('(') != std::string::npos) return "";  // "ones_like(loss)"
  for (const char* suffix : {".weight.grad", ".bias.grad", ".weight", ".bias"}) {
    const std::string s(suffix);
    if (head.size() > s.size() && head.compare(head.size() - s.size(), s.size(), s) == 0) {
      head.resize(head.size() - s.size());
      return head;
    }
  }
  // A dotted path is a module path; a lone word is one only when it is the whole name
  // ("norm", "output") or an FSDP group ("root all_gather"), not a phrase ("load batch").
  if (head.find('.') != std::string::npos) return head;
  if (space == std::string::npos || head == "root" || head == "loss") return head;
  return "";
}

const std::vector<std::string>& known_categories() {
  static const std::vector<std::string> k = {
      "sharded_params",  "unsharded_params", "sharded_grads",      "unsharded_grads",
      "optimizer_state", "activations",      "all_gather_buffers", "reduce_scatter_buffers",
      "temporaries",     "workspaces"};
  return k;
}

std::string category_color(const std::string& key, size_t fallback_index) {
  static const std::map<std::string, std::string> colors = {
      {"sharded_params", "#4e79a7"},     {"unsharded_params", "#a0cbe8"},
      {"sharded_grads", "#f28e2b"},      {"unsharded_grads", "#ffbe7d"},
      {"optimizer_state", "#59a14f"},    {"activations", "#b07aa1"},
      {"all_gather_buffers", "#76b7b2"}, {"reduce_scatter_buffers", "#edc948"},
      {"temporaries", "#ff9da7"},        {"workspaces", "#9c755f"}};
  static const std::vector<std::string> extra = {"#bab0ac", "#8cd17d", "#d4a6c8", "#86bcb6"};
  auto it = colors.find(key);
  return it != colors.end() ? it->second : extra[fallback_index % extra.size()];
}

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& problem,
                      const std::string& fix) {
  throw InputError(where, problem, fix);
}

std::vector<double> numbers(const nlohmann::json& a, const std::string& where, size_t expect) {
  if (!a.is_array())
    bad(where, "is " + std::string(a.type_name()) + ", not an array of numbers",
        "write one number per timeline point");
  if (expect != SIZE_MAX && a.size() != expect)
    bad(where, fmt::format("has {} values but time_s has {}", a.size(), expect),
        "write one value per timeline point");
  std::vector<double> v;
  v.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number())
      bad(fmt::format("{}[{}]", where, i), "is " + a[i].dump(), "use a number");
    v.push_back(a[i].get<double>());
  }
  return v;
}

std::string ranks_label(const std::vector<int>& r) {
  if (r.empty()) return "";
  if (r.size() == 1) return fmt::format("rank {}", r[0]);
  if (r.back() - r.front() + 1 == static_cast<int>(r.size()))
    return fmt::format("ranks {}-{}", r.front(), r.back());
  return fmt::format("{} ranks ({}, ...)", r.size(), r.front());
}

std::string file_stem(const std::string& path) {
  std::string base =
      path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  const size_t dot = base.rfind('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

// Optional summary fields, read leniently as the columns are: a field of another type is
// ignored (nlohmann's value() would throw its own type_error, an uncaught message that names
// no field).
double num(const nlohmann::json& j, const char* key, double dflt = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : dflt;
}
bool flag(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}
std::string text(const nlohmann::json& j, const char* key, const std::string& dflt = "") {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : dflt;
}
int64_t integer(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

std::string summary_line(const nlohmann::json& j) {
  std::vector<std::string> parts;
  if (num(j, "step_time_s") > 0)
    parts.push_back(fmt::format("step {:.3f} s", num(j, "step_time_s")));
  if (num(j, "exposed_comm_s") > 0)
    parts.push_back(fmt::format("exposed comm {:.3f} s", num(j, "exposed_comm_s")));
  if (num(j, "mfu") > 0) parts.push_back(fmt::format("MFU {:.1f}%", 100 * num(j, "mfu")));
  if (flag(j, "out_of_memory")) parts.push_back("OUT OF MEMORY");
  auto p = j.find("problems");
  if (p != j.end() && p->is_array() && !p->empty())
    parts.push_back(fmt::format("{} problem(s)", p->size()));
  else if (flag(j, "ok"))
    parts.push_back("ok");
  std::string out;
  for (const auto& s : parts) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Interns label strings into Report::names.
struct Names {
  std::vector<std::string>& names;
  std::map<std::string, int32_t> ids;
  int32_t id(const nlohmann::json& v) {
    if (!v.is_string() || v.get_ref<const std::string&>().empty()) return -1;
    const std::string& s = v.get_ref<const std::string&>();
    auto [it, fresh] = ids.emplace(s, static_cast<int32_t>(names.size()));
    if (fresh) names.push_back(s);
    return it->second;
  }
};

void peak_from_class(Series& s, const nlohmann::json& c) {
  s.peak_allocated = num(c, "peak_allocated_bytes", s.peak_allocated);
  s.peak_reserved = num(c, "peak_reserved_bytes", s.peak_reserved);
  s.peak_time_s = num(c, "peak_time_s", s.peak_time_s);
  if (auto b = c.find("breakdown_at_peak"); b != c.end() && b->is_object()) {
    s.breakdown_at_peak.clear();
    for (const auto& k : known_categories())
      if (b->contains(k) && (*b)[k].is_number() && (*b)[k].get<double>() > 0)
        s.breakdown_at_peak.emplace_back(k, (*b)[k].get<double>());
    for (auto it = b->begin(); it != b->end(); ++it)
      if (std::find(known_categories().begin(), known_categories().end(), it.key()) ==
              known_categories().end() &&
          it->is_number() && it->get<double>() > 0)
        s.breakdown_at_peak.emplace_back(it.key(), it->get<double>());
  }
  if (auto f = c.find("in_flight_at_peak"); f != c.end() && f->is_array()) {
    for (const auto& op : *f)
      if (op.is_object())
        s.in_flight_at_peak.push_back(
            {text(op, "stream"), text(op, "name"), num(op, "start_s"), num(op, "end_s")});
  }
  if (auto m = c.find("moe_at_peak"); m != c.end() && m->is_object())
    for (MoePart p : kAllMoeParts) {
      const std::string k(moe_part_key(p));
      if (m->contains(k) && (*m)[k].is_number() && (*m)[k].get<double>() > 0)
        s.moe_at_peak.emplace_back(k, (*m)[k].get<double>());
    }
  if (auto a = c.find("all_to_all_spans"); a != c.end() && a->is_array())
    for (const auto& op : *a)
      if (op.is_object())
        s.all_to_all.push_back(
            {text(op, "stream"), text(op, "name"), num(op, "start_s"), num(op, "end_s")});
  if (auto o = c.find("oom"); o != c.end() && o->is_object()) {
    s.oom = fmt::format(
        "OUT OF MEMORY in step {} allocating {} for {} ({}): {} allocated, {} reserved of {}",
        integer(*o, "step"), format_bytes(num(*o, "requested_bytes")), text(*o, "what", "?"),
        text(*o, "category", "?"), format_bytes(num(*o, "allocated_bytes")),
        format_bytes(num(*o, "reserved_bytes")), format_bytes(num(*o, "capacity_bytes")));
  }
}

Series parse_series(const nlohmann::json& tl, const std::string& where, Names& names) {
  if (!tl.is_object())
    bad(where, "is " + std::string(tl.type_name()),
        "write an object with time_s and allocated_bytes columns");
  for (const char* k : {"time_s", "allocated_bytes"})
    if (!tl.contains(k))
      bad(where + "." + k, "is missing",
          "every memory_timeline entry needs time_s and allocated_bytes (docs/report-format.md)");
  Series s;
  s.time_s = numbers(tl["time_s"], where + ".time_s", SIZE_MAX);
  const size_t n = s.time_s.size();
  for (size_t i = 1; i < n; ++i)
    if (s.time_s[i] < s.time_s[i - 1])
      bad(fmt::format("{}.time_s[{}]", where, i),
          fmt::format("is {} after {}", s.time_s[i], s.time_s[i - 1]),
          "write the points in time order (non-decreasing time_s)");
  s.allocated = numbers(tl["allocated_bytes"], where + ".allocated_bytes", n);
  if (tl.contains("reserved_bytes"))
    s.reserved = numbers(tl["reserved_bytes"], where + ".reserved_bytes", n);
  if (tl.contains("host_bytes")) {
    s.host = numbers(tl["host_bytes"], where + ".host_bytes", n);
    if (std::all_of(s.host.begin(), s.host.end(), [](double v) { return v == 0; })) s.host.clear();
  }
  if (auto c = tl.find("by_category"); c != tl.end()) {
    if (!c->is_object())
      bad(where + ".by_category", "is not an object", "write {category: [bytes per point]}");
    std::vector<std::string> keys;
    for (const auto& k : known_categories())
      if (c->contains(k)) keys.push_back(k);
    for (auto it = c->begin(); it != c->end(); ++it)
      if (std::find(keys.begin(), keys.end(), it.key()) == keys.end()) keys.push_back(it.key());
    for (const auto& k : keys) {
      std::vector<double> v = numbers((*c)[k], where + ".by_category." + k, n);
      if (std::all_of(v.begin(), v.end(), [](double x) { return x == 0; })) continue;  // never used
      s.categories.push_back(k);
      s.by_category.push_back(std::move(v));
    }
  }
  // Optional label columns: a missing or mistyped column is ignored (the page shows less).
  auto labels = [&](const char* key, std::vector<int32_t>& out) {
    auto it = tl.find(key);
    if (it == tl.end() || !it->is_array() || it->size() != n) return;
    out.reserve(n);
    for (const auto& v : *it) out.push_back(names.id(v));
  };
  labels("what", s.what);
  labels("op", s.op);
  if (auto ev = tl.find("event"); ev != tl.end() && ev->is_array() && ev->size() == n)
    for (const auto& v : *ev)
      s.is_alloc.push_back(v.is_string() && v.get_ref<const std::string&>() == "free" ? 0 : 1);
  if (auto r = tl.find("ranks"); r != tl.end() && r->is_array())
    for (const auto& x : *r)
      if (x.is_number_integer()) s.ranks.push_back(x.get<int>());
  if (s.ranks.empty() && tl.contains("rank") && tl["rank"].is_number_integer())
    s.ranks.push_back(tl["rank"].get<int>());
  s.label = tl.contains("label") && tl["label"].is_string() ? tl["label"].get<std::string>()
                                                            : ranks_label(s.ranks);
  if (tl.contains("routed_tokens_bytes")) {
    s.routed = numbers(tl["routed_tokens_bytes"], where + ".routed_tokens_bytes", n);
    if (std::all_of(s.routed.begin(), s.routed.end(), [](double v) { return v == 0; }))
      s.routed.clear();
  }
  // The peak from the timeline itself; rank_classes (when present) refines it.
  const size_t pk = peak_index(s);
  if (n) {
    s.peak_allocated = s.allocated[pk];
    s.peak_time_s = s.time_s[pk];
    for (size_t k = 0; k < s.categories.size(); ++k)
      if (s.by_category[k][pk] > 0)
        s.breakdown_at_peak.emplace_back(s.categories[k], s.by_category[k][pk]);
    if (!s.reserved.empty())
      s.peak_reserved = *std::max_element(s.reserved.begin(), s.reserved.end());
  }
  return s;
}

}  // namespace

Report parse_report(const nlohmann::json& j, const std::string& where) {
  const std::string fix =
      "plot a report written by `fullshard simulate --json` or by a real run "
      "(docs/report-format.md)";
  if (!j.is_object()) bad(where, "is " + std::string(j.type_name()) + ", not a report object", fix);
  auto tls = j.find("memory_timeline");
  if (tls == j.end()) bad(where, "has no memory_timeline", fix);
  if (!tls->is_array() || tls->empty())
    bad(where + ": memory_timeline", "is empty or not an array", fix);
  Report r;
  r.path = where;
  r.label = j.contains("label") && j["label"].is_string() ? j["label"].get<std::string>()
                                                          : file_stem(where);
  r.scenario = text(j, "scenario");
  r.world_size = j.contains("world_size") && j["world_size"].is_number_integer()
                     ? j["world_size"].get<int>()
                     : 0;
  r.capacity_bytes = num(j, "capacity_bytes");
  r.summary = summary_line(j);
  Names names{r.names, {}};
  const nlohmann::json* classes =
      j.contains("rank_classes") && j["rank_classes"].is_array() ? &j["rank_classes"] : nullptr;
  for (size_t i = 0; i < tls->size(); ++i) {
    const auto& tl = (*tls)[i];
    Series s = parse_series(tl, fmt::format("{}: memory_timeline[{}]", where, i), names);
    if (s.label.empty()) s.label = fmt::format("timeline {}", i);
    if (classes && tl.contains("class") && tl["class"].is_number_integer()) {
      const size_t ci = tl["class"].get<size_t>();
      if (ci < classes->size() && (*classes)[ci].is_object()) peak_from_class(s, (*classes)[ci]);
    }
    r.series.push_back(std::move(s));
  }
  // The played checkpoint saves (optional; entries without the fields are skipped).
  if (auto ck = j.find("checkpoint"); ck != j.end() && ck->is_object())
    if (auto pl = ck->find("played"); pl != ck->end() && pl->is_array())
      for (const auto& e : *pl) {
        if (!e.is_object() || !e.contains("write_end_s")) continue;
        CheckpointSpan c;
        c.step = static_cast<int>(integer(e, "after_step"));
        c.save_begin_s = num(e, "begin_s");
        c.save_end_s = c.save_begin_s + num(e, "exposed_s");
        c.write_begin_s = num(e, "write_begin_s");
        c.write_end_s = num(e, "write_end_s");
        r.checkpoint.push_back(c);
      }
  return r;
}

Report load_report(const std::string& path) {
  return parse_report(
      read_json_input(path, "a report written by `fullshard simulate --json R.json`"), path);
}

size_t peak_index(const Series& s) {
  size_t best = 0;
  for (size_t i = 1; i < s.allocated.size(); ++i)
    if (s.allocated[i] > s.allocated[best]) best = i;
  return best;
}

namespace {

// Keeps the points `keep` lists (sorted, unique), in every column.
void keep_only(Series& s, std::vector<size_t> keep) {
  const size_t n = s.time_s.size();
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  auto pick = [&](auto& col) {
    if (col.size() != n) return;
    std::remove_reference_t<decltype(col)> out;
    out.reserve(keep.size());
    for (size_t i : keep) out.push_back(col[i]);
    col = std::move(out);
  };
  pick(s.time_s);
  pick(s.allocated);
  pick(s.reserved);
  pick(s.host);
  for (auto& c : s.by_category) pick(c);
  pick(s.routed);
  pick(s.what);
  pick(s.op);
  pick(s.is_alloc);
}

std::vector<size_t> peaks(const Series& s) {
  std::vector<size_t> keep = {peak_index(s)};
  if (!s.reserved.empty())
    keep.push_back(static_cast<size_t>(std::max_element(s.reserved.begin(), s.reserved.end()) -
                                       s.reserved.begin()));
  return keep;
}

}  // namespace

void downsample_by_time(Series& s, double t_end, size_t columns) {
  const size_t n = s.time_s.size();
  if (n <= 4 * columns || columns == 0 || !(t_end > 0)) return;
  std::vector<size_t> keep = peaks(s);
  size_t b = 0;
  while (b < n) {
    const size_t col = std::min(
        columns - 1, static_cast<size_t>(s.time_s[b] / t_end * static_cast<double>(columns)));
    size_t e = b, hi = b, lo = b;
    while (e < n &&
           std::min(columns - 1, static_cast<size_t>(s.time_s[e] / t_end *
                                                     static_cast<double>(columns))) == col) {
      if (s.allocated[e] > s.allocated[hi]) hi = e;
      if (s.allocated[e] < s.allocated[lo]) lo = e;
      ++e;
    }
    keep.insert(keep.end(), {b, lo, hi, e - 1});
    b = e;
  }
  keep_only(s, std::move(keep));
}

void downsample(Series& s, size_t max_points) {
  const size_t n = s.time_s.size();
  if (n <= max_points || max_points < 8) return;
  // NOTE [Downsampling]: buckets of consecutive points keep their lowest and highest
  // allocated point, so the envelope (and so the peak) survives; the reserved peak, the first
  // and the last point are kept too. A stacked area drawn from the kept points is exact at
  // them and an approximation between.
  const size_t buckets = (max_points - 4) / 2;
  const size_t per = (n + buckets - 1) / buckets;
  std::vector<size_t> keep = peaks(s);
  keep.push_back(0);
  keep.push_back(n - 1);
  for (size_t b = 0; b < n; b += per) {
    const size_t e = std::min(n, b + per);
    size_t hi = b, lo = b;
    for (size_t i = b; i < e; ++i) {
      if (s.allocated[i] > s.allocated[hi]) hi = i;
      if (s.allocated[i] < s.allocated[lo]) lo = i;
    }
    keep.push_back(lo);
    keep.push_back(hi);
  }
  keep_only(s, std::move(keep));
}

std::vector<std::vector<double>> stack(const Series& s, const std::vector<bool>& visible) {
  const size_t n = s.time_s.size();
  std::vector<std::vector<double>> tops(s.categories.size(), std::vector<double>(n, 0));
  for (size_t k = 0; k < s.categories.size(); ++k)
    for (size_t i = 0; i < n; ++i) {
      const double below = k ? tops[k - 1][i] : 0;
      const bool on = k >= visible.size() || visible[k];
      tops[k][i] = below + (on ? s.by_category[k][i] : 0);
    }
  return tops;
}

std::optional<size_t> matching_series(const Report& r, const Series& s, size_t position) {
  if (!s.ranks.empty())
    for (size_t i = 0; i < r.series.size(); ++i) {
      const auto& rk = r.series[i].ranks;
      if (std::find(rk.begin(), rk.end(), s.ranks.front()) != rk.end()) return i;
    }
  if (position < r.series.size()) return position;
  return std::nullopt;
}

// NOTE [Page data]: the page gets one compact JSON object: times as integer nanoseconds and
// bytes as integers (a few MB for 3 classes x 4,000 points, instead of 17-digit doubles);
// label strings once per report in `names` (with their module in `modules`), referenced by
// index; `ev` is a string of 'a' / 'f' per point. Columns a report lacks are absent.
nlohmann::json page_data(const std::vector<Report>& reports) {
  using nlohmann::json;
  json out = json::object();
  json rs = json::array();
  auto ints = [](const std::vector<double>& v, double scale) {
    json a = json::array();
    for (double x : v) a.push_back(static_cast<long long>(std::llround(x * scale)));
    return a;
  };
  for (const auto& r : reports) {
    json jr = {{"label", r.label},
               {"path", r.path},
               {"scenario", r.scenario},
               {"world_size", r.world_size},
               {"capacity", r.capacity_bytes},
               {"summary", r.summary},
               {"names", r.names}};
    json mods = json::array();
    for (const auto& n : r.names) mods.push_back(module_of(n));
    jr["modules"] = mods;
    json ss = json::array();
    for (const auto& s : r.series) {
      json js = {{"label", s.label},
                 {"ranks", s.ranks},
                 {"t", ints(s.time_s, 1e9)},
                 {"a", ints(s.allocated, 1)}};
      if (!s.reserved.empty()) js["r"] = ints(s.reserved, 1);
      if (!s.host.empty()) js["h"] = ints(s.host, 1);
      json cats = json::array();
      for (size_t k = 0; k < s.categories.size(); ++k)
        cats.push_back({{"key", s.categories[k]},
                        {"color", category_color(s.categories[k], k)},
                        {"v", ints(s.by_category[k], 1)}});
      js["cats"] = cats;
      if (!s.what.empty()) js["what"] = s.what;
      if (!s.op.empty()) js["op"] = s.op;
      if (!s.is_alloc.empty()) {
        std::string ev(s.is_alloc.size(), 'a');
        for (size_t i = 0; i < ev.size(); ++i) ev[i] = s.is_alloc[i] ? 'a' : 'f';
        js["ev"] = ev;
      }
      json bd = json::array();
      for (const auto& [k, v] : s.breakdown_at_peak) bd.push_back({k, v});
      json fl = json::array();
      for (const auto& f : s.in_flight_at_peak)
        fl.push_back({{"stream", f.stream},
                      {"name", f.name},
                      {"module", module_of(f.name)},
                      {"start", f.start_s},
                      {"end", f.end_s}});
      js["peak"] = {{"a", s.peak_allocated},
                    {"r", s.peak_reserved},
                    {"t", s.peak_time_s},
                    {"breakdown", bd},
                    {"in_flight", fl}};
      if (!s.moe_at_peak.empty()) {
        json moe = json::array();
        for (const auto& [k, v] : s.moe_at_peak) moe.push_back({k, v});
        js["peak"]["moe"] = moe;
      }
      if (!s.routed.empty()) js["rt"] = ints(s.routed, 1);
      if (!s.all_to_all.empty()) {
        json a2a = json::array();
        for (const auto& f : s.all_to_all) a2a.push_back({f.start_s, f.end_s, f.name});
        js["a2a"] = a2a;
      }
      if (!s.oom.empty()) js["oom"] = s.oom;
      ss.push_back(js);
    }
    jr["series"] = ss;
    if (!r.checkpoint.empty()) {
      json ck = json::array();
      for (const auto& c : r.checkpoint)
        ck.push_back({c.save_begin_s, c.save_end_s, c.write_begin_s, c.write_end_s, c.step});
      jr["ck"] = ck;
    }
    rs.push_back(jr);
  }
  out["reports"] = rs;
  return out;
}

std::string markup_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace fullshard::plot
