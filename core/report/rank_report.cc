#include "core/report/rank_report.h"

#include <algorithm>

#include <map>

#include "core/common/error.h"
#include "core/runtime/op.h"

namespace fullshard {
namespace {

using nlohmann::json;

json categories(const CategoryBytes& c) {
  json j = json::object();
  for (MemCategory k : kAllMemCategories) j[std::string(category_key(k))] = c[static_cast<int>(k)];
  return j;
}

CategoryBytes categories_from(const json& j) {
  CategoryBytes c{};
  for (MemCategory k : kAllMemCategories)
    c[static_cast<int>(k)] = j.value(std::string(category_key(k)), uint64_t{0});
  return c;
}

template <typename T>
T field(const json& j, const char* name, const char* where) {
  auto it = j.find(name);
  if (it == j.end())
    throw InputError(std::string(where) + "." + name, "is missing", "write a complete report");
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    throw InputError(std::string(where) + "." + name, "has the wrong type",
                     "write a complete report");
  }
}

}  // namespace

json rank_class_json(const RankReport& c) {
  json cj;
  cj["ranks"] = c.ranks;
  cj["representative"] = c.representative;
  cj["peak_allocated_bytes"] = c.peak_allocated_bytes;
  cj["peak_reserved_bytes"] = c.peak_reserved_bytes;
  cj["peak_host_bytes"] = c.peak_host_bytes;
  cj["init_peak_allocated_bytes"] = c.init_peak_allocated_bytes;
  cj["init_peak_reserved_bytes"] = c.init_peak_reserved_bytes;
  cj["peak_time_s"] = c.peak_time_s;
  cj["breakdown_at_peak"] = categories(c.breakdown_at_peak);
  if (c.moe_at_peak) {
    json m;
    for (MoePart p : kAllMoeParts)
      m[std::string(moe_part_key(p))] = (*c.moe_at_peak)[static_cast<int>(p)];
    cj["moe_at_peak"] = m;
  }
  cj["allocated_after_step"] = c.allocated_after_step;
  cj["num_alloc_retries"] = c.allocator.num_alloc_retries;
  cj["num_segments"] = c.allocator.num_segments;
  cj["instructions"] = c.instructions;
  cj["end_time_s"] = c.end_time_s;
  cj["compute_s"] = c.compute_s;
  cj["exposed_comm_s"] = c.exposed_comm_s;
  cj["comm_s"] = c.comm_s;
  cj["last_step_s"] = c.last_step_s;
  json busy = json::object();
  for (StreamRole s : kAllStreams)
    if (!stream_is_optional(s) || c.busy_s[static_cast<int>(s)] > 0)  // only with pp / cp
      busy[std::string(stream_name(s))] = c.busy_s[static_cast<int>(s)];
  cj["stream_busy_s"] = busy;
  json counts = json::object();
  for (int k = 0; k < kCollectiveKindCount; ++k)
    if (c.collectives_per_step[k])
      counts[collective_name(static_cast<CollectiveKind>(k))] = c.collectives_per_step[k];
  cj["collectives_last_step"] = counts;
  json in_flight = json::array();
  for (const auto& op : c.in_flight_at_peak)
    in_flight.push_back(
        {{"stream", op.stream}, {"name", op.name}, {"start_s", op.start_s}, {"end_s", op.end_s}});
  cj["in_flight_at_peak"] = in_flight;
  if (!c.all_to_all_spans.empty()) {
    json spans = json::array();
    for (const auto& op : c.all_to_all_spans)
      spans.push_back(
          {{"stream", op.stream}, {"name", op.name}, {"start_s", op.start_s}, {"end_s", op.end_s}});
    cj["all_to_all_spans"] = spans;
  }
  if (c.oom) {
    cj["oom"] = {{"requested_bytes", c.oom->requested_bytes},
                 {"what", c.oom->what},
                 {"category", c.oom->category},
                 {"capacity_bytes", c.oom->capacity_bytes},
                 {"step", c.oom->step},
                 {"allocated_bytes", c.oom->at_failure.allocated_bytes},
                 {"reserved_bytes", c.oom->at_failure.reserved_bytes},
                 {"breakdown", categories(c.oom->at_failure.by_category)}};
  }
  return cj;
}

uint64_t RoutedTokenBytes::after(const MemoryEvent& e, const CategoryBytes& before,
                                 std::string_view what) {
  if (e.is_alloc) {
    if (moe_part(e.category, what) == MoePart::kRoutedTokens) {
      const int k = static_cast<int>(e.category);
      const uint64_t n = e.by_category[k] - before[k];
      live_[e.buffer_id] = n;
      bytes_ += n;
    }
  } else if (const auto it = live_.find(e.buffer_id); it != live_.end()) {
    bytes_ -= it->second;
    live_.erase(it);
  }
  return bytes_;
}

json rank_timeline_json(const RankReport& c, size_t class_index) {
  if (c.timeline.empty()) return nullptr;
  // Timeline as columns (compact): time, allocated, reserved, host, and one per category.
  json tl;
  tl["class"] = class_index;
  tl["ranks"] = c.ranks;
  json t = json::array(), a = json::array(), rs = json::array(), h = json::array();
  json cats = json::object();
  for (MemCategory k : kAllMemCategories) cats[std::string(category_key(k))] = json::array();
  for (const auto& p : c.timeline) {
    t.push_back(p.time_s);
    a.push_back(p.allocated_bytes);
    rs.push_back(p.reserved_bytes);
    h.push_back(p.host_bytes);
    for (MemCategory k : kAllMemCategories)
      cats[std::string(category_key(k))].push_back(p.by_category[static_cast<int>(k)]);
  }
  tl["time_s"] = t;
  tl["allocated_bytes"] = a;
  tl["reserved_bytes"] = rs;
  tl["host_bytes"] = h;
  tl["by_category"] = cats;
  // NOTE [Routed tokens in the timeline] in rank_report.h: only a model with routed tokens.
  if (std::any_of(c.timeline.begin(), c.timeline.end(),
                  [](const TimelinePoint& p) { return p.routed_bytes > 0; })) {
    json rt = json::array();
    for (const auto& p : c.timeline) rt.push_back(p.routed_bytes);
    tl["routed_tokens_bytes"] = rt;
  }
  // Optional label columns (NOTE [Timeline labels]).
  if (!c.timeline_names.empty()) {
    auto label = [&](int32_t i) {
      return i >= 0 && static_cast<size_t>(i) < c.timeline_names.size() ? c.timeline_names[i]
                                                                        : std::string();
    };
    json what = json::array(), op = json::array(), ev = json::array();
    for (const auto& p : c.timeline) {
      what.push_back(label(p.what));
      op.push_back(label(p.op));
      ev.push_back(p.is_alloc ? "alloc" : "free");
    }
    tl["what"] = what;
    tl["event"] = ev;
    tl["op"] = op;
  }
  return tl;
}

RankReport rank_report_from_json(const json& cj, const json& tl) {
  const char* w = "rank_classes[]";
  if (!cj.is_object()) throw InputError(w, "is not an object", "write a complete report");
  RankReport c;
  c.ranks = field<std::vector<int>>(cj, "ranks", w);
  c.representative = field<int>(cj, "representative", w);
  c.peak_allocated_bytes = field<uint64_t>(cj, "peak_allocated_bytes", w);
  c.peak_reserved_bytes = field<uint64_t>(cj, "peak_reserved_bytes", w);
  c.peak_host_bytes = field<uint64_t>(cj, "peak_host_bytes", w);
  c.init_peak_allocated_bytes = field<uint64_t>(cj, "init_peak_allocated_bytes", w);
  c.init_peak_reserved_bytes = field<uint64_t>(cj, "init_peak_reserved_bytes", w);
  c.peak_time_s = field<double>(cj, "peak_time_s", w);
  c.breakdown_at_peak = categories_from(field<json>(cj, "breakdown_at_peak", w));
  if (cj.contains("moe_at_peak") && cj.at("moe_at_peak").is_object()) {
    MoeBytes m{};
    for (MoePart p : kAllMoeParts)
      m[static_cast<int>(p)] =
          cj.at("moe_at_peak").value(std::string(moe_part_key(p)), uint64_t{0});
    c.moe_at_peak = m;
  }
  c.allocated_after_step = field<std::vector<uint64_t>>(cj, "allocated_after_step", w);
  c.allocator.num_alloc_retries = field<uint64_t>(cj, "num_alloc_retries", w);
  c.allocator.num_segments = field<uint64_t>(cj, "num_segments", w);
  c.instructions = field<uint64_t>(cj, "instructions", w);
  c.end_time_s = field<double>(cj, "end_time_s", w);
  c.compute_s = field<double>(cj, "compute_s", w);
  c.exposed_comm_s = field<double>(cj, "exposed_comm_s", w);
  c.comm_s = field<double>(cj, "comm_s", w);
  c.last_step_s = field<double>(cj, "last_step_s", w);
  const json busy = field<json>(cj, "stream_busy_s", w);
  for (StreamRole s : kAllStreams)
    c.busy_s[static_cast<int>(s)] = busy.value(std::string(stream_name(s)), 0.0);
  const json counts = field<json>(cj, "collectives_last_step", w);
  for (int k = 0; k < kCollectiveKindCount; ++k)
    c.collectives_per_step[k] = counts.value(collective_name(static_cast<CollectiveKind>(k)), 0);
  for (const auto& op : field<json>(cj, "in_flight_at_peak", w))
    c.in_flight_at_peak.push_back(
        InFlightOp{field<std::string>(op, "stream", w), field<std::string>(op, "name", w),
                   field<double>(op, "start_s", w), field<double>(op, "end_s", w)});
  if (cj.contains("all_to_all_spans"))
    for (const auto& op : field<json>(cj, "all_to_all_spans", w))
      c.all_to_all_spans.push_back(
          InFlightOp{field<std::string>(op, "stream", w), field<std::string>(op, "name", w),
                     field<double>(op, "start_s", w), field<double>(op, "end_s", w)});
  if (cj.contains("oom")) {
    const json& o = cj["oom"];
    OutOfMemoryInfo m;
    m.requested_bytes = field<uint64_t>(o, "requested_bytes", w);
    m.what = field<std::string>(o, "what", w);
    m.category = field<std::string>(o, "category", w);
    m.capacity_bytes = field<uint64_t>(o, "capacity_bytes", w);
    m.step = field<int>(o, "step", w);
    m.at_failure.allocated_bytes = field<uint64_t>(o, "allocated_bytes", w);
    m.at_failure.reserved_bytes = field<uint64_t>(o, "reserved_bytes", w);
    m.at_failure.by_category = categories_from(field<json>(o, "breakdown", w));
    c.oom = m;
  }
  if (tl.is_null()) return c;
  const char* tw = "memory_timeline[]";
  const auto t = field<std::vector<double>>(tl, "time_s", tw);
  const auto a = field<std::vector<uint64_t>>(tl, "allocated_bytes", tw);
  const auto rs = field<std::vector<uint64_t>>(tl, "reserved_bytes", tw);
  const auto h = field<std::vector<uint64_t>>(tl, "host_bytes", tw);
  const json cats = field<json>(tl, "by_category", tw);
  const bool labels = tl.contains("what");
  std::vector<std::string> what, ev, op;
  if (labels) {
    what = field<std::vector<std::string>>(tl, "what", tw);
    ev = field<std::vector<std::string>>(tl, "event", tw);
    op = field<std::vector<std::string>>(tl, "op", tw);
  }
  const size_t n = t.size();
  const auto rt = tl.contains("routed_tokens_bytes")
                      ? field<std::vector<uint64_t>>(tl, "routed_tokens_bytes", tw)
                      : std::vector<uint64_t>(n, 0);
  if (a.size() != n || rs.size() != n || h.size() != n || rt.size() != n ||
      (labels && (what.size() != n || ev.size() != n || op.size() != n)))
    throw InputError(tw, "has columns of different lengths", "write a complete report");
  std::map<std::string, int32_t> ids;
  auto intern = [&](const std::string& s) -> int32_t {
    if (s.empty()) return -1;
    auto [it, added] = ids.emplace(s, static_cast<int32_t>(c.timeline_names.size()));
    if (added) c.timeline_names.push_back(s);
    return it->second;
  };
  for (size_t i = 0; i < n; ++i) {
    TimelinePoint p;
    p.time_s = t[i];
    p.allocated_bytes = a[i];
    p.reserved_bytes = rs[i];
    p.host_bytes = h[i];
    p.routed_bytes = rt[i];
    for (MemCategory k : kAllMemCategories) {
      const std::string key(category_key(k));
      if (cats.contains(key) && cats[key].is_array() && i < cats[key].size())
        p.by_category[static_cast<int>(k)] = cats[key][i].get<uint64_t>();
    }
    if (labels) {
      p.what = intern(what[i]);
      p.op = intern(op[i]);
      p.is_alloc = ev[i] == "alloc";
    }
    c.timeline.push_back(p);
  }
  // Label columns whose every entry is empty still mark a labelled timeline.
  if (labels && c.timeline_names.empty()) c.timeline_names.emplace_back();
  return c;
}

}  // namespace fullshard
