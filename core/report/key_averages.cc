#include "core/report/key_averages.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <unordered_map>

#include "core/common/error.h"

namespace fullshard {
namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string op_key(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  size_t i = 0;
  while (i < name.size()) {
    // "[digits]": dropped.
    if (name[i] == '[') {
      const size_t close = name.find(']', i);
      if (close != std::string_view::npos && all_digits(name.substr(i + 1, close - i - 1))) {
        i = close + 1;
        continue;
      }
    }
    // ".digits" ending a dotted component (followed by '.', ' ', '[' or the end): dropped.
    if (name[i] == '.') {
      size_t j = i + 1;
      while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
      if (j > i + 1 && (j == name.size() || name[j] == '.' || name[j] == ' ' || name[j] == '[')) {
        i = j;
        continue;
      }
    }
    // A leading "digits." component (a name that starts with its index).
    if (i == 0 && name[0] >= '0' && name[0] <= '9') {
      size_t j = 0;
      while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
      if (j < name.size() && name[j] == '.') {
        i = j + 1;
        continue;
      }
    }
    out.push_back(name[i++]);
  }
  return out;
}

std::string key_id(const std::string& key, const std::string& kind) { return key + '\t' + kind; }

std::vector<KeyAverage> key_averages(const std::vector<LaunchedOp>& ops,
                                     const std::vector<KernelTime>& times) {
  std::unordered_map<uint64_t, double> by_seq;
  by_seq.reserve(times.size());
  for (const KernelTime& t : times) by_seq[t.seq] += std::max(0.0, t.end_s - t.begin_s);
  std::unordered_map<std::string, size_t> index;
  std::vector<KeyAverage> rows;
  for (const LaunchedOp& op : ops) {
    KeyAverage row;
    row.key = op_key(op.name);
    row.kind = op_kind_name(op.kind);
    auto [it, added] = index.emplace(key_id(row.key, row.kind), rows.size());
    if (added) rows.push_back(std::move(row));
    KeyAverage& r = rows[it->second];
    ++r.calls;
    r.flops += op.flops;
    r.bytes += op.bytes;
    if (auto t = by_seq.find(op.seq); t != by_seq.end()) r.measured_s += t->second;
  }
  std::sort(rows.begin(), rows.end(), [](const KeyAverage& a, const KeyAverage& b) {
    if (a.measured_s != b.measured_s) return a.measured_s > b.measured_s;
    return key_id(a.key, a.kind) < key_id(b.key, b.kind);
  });
  return rows;
}

void attach_predictions(std::vector<KeyAverage>& table, const PredictedKeyTimes& predicted) {
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < table.size(); ++i) {
    index.emplace(key_id(table[i].key, table[i].kind), i);
    table[i].predicted_s = 0;
  }
  for (const auto& [id, s] : predicted) {
    if (auto it = index.find(id); it != index.end()) {
      table[it->second].predicted_s = s;
      continue;
    }
    KeyAverage row;
    const size_t tab = id.find('\t');
    row.key = id.substr(0, tab);
    row.kind = tab == std::string::npos ? "" : id.substr(tab + 1);
    row.predicted_s = s;
    table.push_back(std::move(row));
  }
}

std::vector<KeyAverage> differ_most(const std::vector<KeyAverage>& table, size_t n) {
  std::vector<KeyAverage> rows;
  for (const KeyAverage& r : table)
    if (r.predicted_s >= 0) rows.push_back(r);
  std::stable_sort(rows.begin(), rows.end(), [](const KeyAverage& a, const KeyAverage& b) {
    return std::abs(a.measured_s - a.predicted_s) > std::abs(b.measured_s - b.predicted_s);
  });
  if (rows.size() > n) rows.resize(n);
  return rows;
}

nlohmann::json key_averages_json(const std::vector<KeyAverage>& table) {
  nlohmann::json a = nlohmann::json::array();
  for (const KeyAverage& r : table) {
    nlohmann::json j{{"key", r.key},
                     {"kind", r.kind},
                     {"calls", r.calls},
                     {"measured_s", r.measured_s},
                     {"flops", r.flops},
                     {"bytes", r.bytes},
                     {"flops_per_s", r.flops_per_s()},
                     {"bytes_per_s", r.bytes_per_s()}};
    j["predicted_s"] = r.predicted_s >= 0 ? nlohmann::json(r.predicted_s) : nlohmann::json(nullptr);
    a.push_back(std::move(j));
  }
  return a;
}

std::vector<KeyAverage> key_averages_from_json(const nlohmann::json& j) {
  if (!j.is_array())
    throw InputError("ops", "is not an array", "give the per-op table as an array of objects");
  std::vector<KeyAverage> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    const std::string where = "ops[" + std::to_string(i) + "]";
    auto num = [&](const char* f) {
      if (!e.is_object() || !e.contains(f) || !e[f].is_number())
        throw InputError(where + "." + f, "is missing or not a number", "write a number");
      const double v = e[f].get<double>();
      if (!std::isfinite(v) || v < 0)
        throw InputError(where + "." + f, "is negative or not finite", "write a number >= 0");
      return v;
    };
    KeyAverage r;
    if (!e.is_object() || !e.contains("key") || !e["key"].is_string())
      throw InputError(where + ".key", "is missing or not a string", "write the op's key");
    r.key = e["key"].get<std::string>();
    r.kind = e.contains("kind") && e["kind"].is_string() ? e["kind"].get<std::string>() : "";
    r.calls = static_cast<int64_t>(num("calls"));
    r.measured_s = num("measured_s");
    r.flops = num("flops");
    r.bytes = num("bytes");
    if (e.contains("predicted_s") && !e["predicted_s"].is_null())
      r.predicted_s = num("predicted_s");
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace fullshard
