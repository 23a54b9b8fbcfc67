#include "runner/launch_options.h"

#include <set>

#include <fmt/format.h>

#include "core/common/error.h"

namespace fullshard::runner {
namespace {

// The one list of the options that travel: `f(key, field)` for each, in declaration order.
template <class Options, class F>
void for_each_option(Options& o, F&& f) {
  f("scenario_path", o.scenario_path);
  f("backend", o.backend);
  f("collectives", o.collectives);
  f("nproc", o.nproc);
  f("metrics_path", o.metrics_path);
  f("timeout_s", o.timeout_s);
  f("check_fingerprints", o.check_fingerprints);
  f("steps", o.steps);
  f("progress", o.progress);
  f("self_exe", o.self_exe);
  f("collect_reports", o.collect_reports);
  f("on_nonfinite", o.on_nonfinite);
  f("checkpoint_dir", o.checkpoint_dir);
  f("checkpoint_every", o.checkpoint_every);
  f("keep_last", o.keep_last);
  f("checkpoint_mode", o.checkpoint_mode);
  f("resume", o.resume);
  f("init_from", o.init_from);
  f("data", o.data);
  f("data_format", o.data_format);
  f("eval_every", o.eval_every);
  f("eval_batches", o.eval_batches);
}

using OnNonFinite = LaunchOptions::OnNonFinite;

// Option strings are paths and names, bytes to the kernel: one that is not UTF-8 (which JSON
// text cannot hold) travels as {"hex": "..."}.
nlohmann::json to_value(const std::string& v) {
  nlohmann::json j = v;
  try {
    (void)j.dump();
    return j;
  } catch (const nlohmann::json::type_error&) {
    std::string hex;
    for (unsigned char c : v) hex += fmt::format("{:02x}", c);
    return {{"hex", hex}};
  }
}
nlohmann::json to_value(const CheckpointSaveMode& v) { return checkpoint_save_mode_name(v); }
nlohmann::json to_value(const OnNonFinite& v) {
  return v == OnNonFinite::kContinue ? "continue" : "stop";
}
template <class T>
nlohmann::json to_value(const T& v) {
  return v;
}

void from_value(const nlohmann::json& j, const std::string& where, std::string& v) {
  if (j.is_object() && j.size() == 1 && j.contains("hex") && j["hex"].is_string()) {
    const std::string hex = j["hex"].get<std::string>();
    auto digit = [&](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      throw InputError(where + ".hex", "is not lower-case hex digits", "write two per byte");
    };
    if (hex.size() % 2) throw InputError(where + ".hex", "has an odd length", "write two per byte");
    v.clear();
    for (size_t i = 0; i < hex.size(); i += 2)
      v.push_back(static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1])));
    return;
  }
  if (!j.is_string()) throw InputError(where, "is not a string", "write a string");
  v = j.get<std::string>();
}
void from_value(const nlohmann::json& j, const std::string& where, bool& v) {
  if (!j.is_boolean()) throw InputError(where, "is not true or false", "write true or false");
  v = j.get<bool>();
}
void from_value(const nlohmann::json& j, const std::string& where, int& v) {
  if (!j.is_number_integer() || j.get<int64_t>() != static_cast<int64_t>(j.get<int>()))
    throw InputError(where, "is not an integer (int)", "write an integer");
  v = j.get<int>();
}
void from_value(const nlohmann::json& j, const std::string& where, OnNonFinite& v) {
  if (j == "stop")
    v = OnNonFinite::kStop;
  else if (j == "continue")
    v = OnNonFinite::kContinue;
  else
    throw InputError(where, "is " + j.dump(), "write \"stop\" or \"continue\"");
}

void from_value(const nlohmann::json& j, const std::string& where, CheckpointSaveMode& v) {
  const auto m =
      j.is_string() ? checkpoint_save_mode_from_name(j.get<std::string>()) : std::nullopt;
  if (!m) throw InputError(where, "is " + j.dump(), "write \"sync\" or \"async\"");
  v = *m;
}

}  // namespace

nlohmann::json launch_options_json(const LaunchOptions& o) {
  nlohmann::json j = nlohmann::json::object();
  for_each_option(o, [&](const char* key, const auto& field) { j[key] = to_value(field); });
  return j;
}

LaunchOptions launch_options_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(where, "is not a JSON object", "write the options object");
  LaunchOptions o;
  std::set<std::string> known;
  for_each_option(o, [&](const char* key, auto& field) {
    known.insert(key);
    if (auto it = j.find(key); it != j.end()) from_value(*it, where + "." + key, field);
  });
  for (const auto& [key, value] : j.items())
    if (!known.count(key)) throw InputError(where + "." + key, "is not an option", "remove it");
  return o;
}

Scenario load_run_scenario(const LaunchOptions& o) {
  Scenario s = load_scenario_file(o.scenario_path);
  if (!o.data.empty()) {
    s.training.data.path = o.data;
    s.training.data.val_path
        .clear();  // the scenario's validation data belongs to its own training data
  }
  if (!o.data_format.empty()) s.training.data.format = o.data_format;
  return s;
}

}  // namespace fullshard::runner
