#include "tools/plot/training_data.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/input_file.h"
#include "core/common/json_file.h"
#include "core/common/user_text.h"

namespace fullshard::plot {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string label_of(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  for (const char* ext : {".partial", ".jsonl", ".csv", ".json"})
    if (ends_with(name, ext)) name.resize(name.size() - std::string(ext).size());
  return name.empty() ? path : name;
}

std::string at(const std::string& where, size_t line) { return where + ":" + std::to_string(line); }

// Drops a column whose values are all absent.
void drop_if_empty(std::vector<double>& v) {
  for (double x : v)
    if (!std::isnan(x)) return;
  v.clear();
}

void check_steps(const TrainingRun& r, const std::string& where) {
  if (r.step.empty())
    throw InputError(where, "has no steps",
                     "give a --metrics file of a run that trained at least one step");
}

// A number from a JSON field: absent or null -> NaN; anything else that is not a finite number
// is an error naming the field.
double json_number(const nlohmann::json& row, const char* key, const std::string& where,
                   bool null_ok) {
  auto it = row.find(key);
  if (it == row.end() || (it->is_null() && null_ok)) return kNaN;
  if (!it->is_number())
    throw InputError(where + ": " + key, "is " + printable(it->dump(), 40), "write a number");
  const double v = it->get<double>();
  if (!std::isfinite(v))
    throw InputError(where + ": " + key, "is not finite", "write a finite number");
  return v;
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  for (char c : line) {
    if (c == ',') {
      cells.push_back(cell);
      cell.clear();
    } else if (c != '\r') {
      cell += c;
    }
  }
  cells.push_back(cell);
  for (auto& c : cells) {
    const size_t a = c.find_first_not_of(" \t"), b = c.find_last_not_of(" \t");
    c = a == std::string::npos ? "" : c.substr(a, b - a + 1);
  }
  return cells;
}

}  // namespace

bool is_training_input(const std::string& path) {
  return ends_with(path, ".jsonl") || ends_with(path, ".jsonl.partial") || ends_with(path, ".csv");
}

TrainingRun parse_metrics_jsonl(const std::string& text, const std::string& where) {
  TrainingRun r;
  r.label = label_of(where);
  std::istringstream in(text);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json row;
    try {  // NOTE [Bounded JSON nesting]: an error message dumps the value, one call per level
      row = parse_json_text(line, at(where, n));
    } catch (const InputError&) {
      throw InputError(at(where, n), "is not a JSON object",
                       "give fullshard's --metrics JSONL (one object per line)");
    }
    if (!row.is_object() || !row.contains("step"))
      throw InputError(at(where, n), "has no \"step\"",
                       "give fullshard's --metrics JSONL (one object per step)");
    const double step = json_number(row, "step", at(where, n), false);
    if (std::isnan(step) || step < 0)
      throw InputError(at(where, n) + ": step", "is missing or negative", "write a step >= 0");
    r.step.push_back(step + 1);  // the metrics count from 0; the launcher prints step 1 first
    r.loss.push_back(json_number(row, "loss", at(where, n), true));
    r.eval_loss.push_back(json_number(row, "eval_loss", at(where, n), true));
    r.tokens_per_s.push_back(json_number(row, "tokens_per_s", at(where, n), true));
    r.peak_allocated.push_back(json_number(row, "peak_allocated_bytes", at(where, n), true));
    if (auto ops = row.find("ops"); ops != row.end() && ops->is_array() && !ops->empty()) {
      std::vector<OpTimes> table;
      for (size_t i = 0; i < ops->size(); ++i) {
        const auto& e = (*ops)[i];
        const std::string w = at(where, n) + ": ops[" + std::to_string(i) + "]";
        if (!e.is_object() || !e.contains("key") || !e["key"].is_string())
          throw InputError(w + ".key", "is missing",
                           "give fullshard's --metrics JSONL (each op names its key)");
        OpTimes t;
        t.key = e["key"].get<std::string>();
        t.kind = e.value("kind", "");
        t.measured_s = json_number(e, "measured_s", w, false);
        if (std::isnan(t.measured_s))
          throw InputError(w + ".measured_s", "is missing", "write a number");
        t.predicted_s = json_number(e, "predicted_s", w, true);
        table.push_back(std::move(t));
      }
      r.last_ops = std::move(table);
      r.last_ops_step = step + 1;
    }
  }
  check_steps(r, where);
  drop_if_empty(r.tokens_per_s);
  drop_if_empty(r.peak_allocated);
  drop_if_empty(r.eval_loss);
  return r;
}

TrainingRun parse_training_csv(const std::string& text, const std::string& where) {
  TrainingRun r;
  r.label = label_of(where);
  std::istringstream in(text);
  std::string line;
  size_t n = 0;
  std::vector<std::string> header;
  int col_step = -1, col_loss = -1, col_tps = -1, col_mem = -1;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[0] == '#') continue;
    std::vector<std::string> cells = split_csv(line);
    if (header.empty()) {
      header = cells;
      for (size_t i = 0; i < header.size(); ++i) {
        const std::string& h = header[i];
        if (h == "step")
          col_step = static_cast<int>(i);
        else if (h == "loss")
          col_loss = static_cast<int>(i);
        else if (h == "tokens_per_s" || h == "tps" || h == "wps")
          col_tps = static_cast<int>(i);
        else if (h == "peak_allocated_bytes" || h == "memory_bytes")
          col_mem = static_cast<int>(i);
      }
      if (col_step < 0 || col_loss < 0)
        throw InputError(at(where, n), "header is '" + printable(line, 80) + "'",
                         "name the columns: step,loss[,tokens_per_s][,peak_allocated_bytes]");
      continue;
    }
    if (cells.size() > header.size())
      throw InputError(at(where, n),
                       "has " + std::to_string(cells.size()) + " cells for " +
                           std::to_string(header.size()) + " columns",
                       "write one cell per column");
    const auto cell = [&](int c, const char* name, bool required) {
      if (c < 0 || static_cast<size_t>(c) >= cells.size() || cells[c].empty()) {
        if (required) throw InputError(at(where, n) + ": " + name, "is empty", "write a number");
        return kNaN;
      }
      const std::string& s = cells[c];
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (end != s.c_str() + s.size())
        throw InputError(at(where, n) + ": " + name, "is '" + printable(s, 40) + "'",
                         "write a number");
      return std::isfinite(v) ? v : kNaN;  // a diverged loss ("nan", "inf") is a gap
    };
    const double step = cell(col_step, "step", true);
    if (std::isnan(step) || step < 0)
      throw InputError(at(where, n) + ": step", "is not a step", "write a step >= 0");
    r.step.push_back(step);
    r.loss.push_back(cell(col_loss, "loss", false));
    r.tokens_per_s.push_back(cell(col_tps, "tokens_per_s", false));
    r.peak_allocated.push_back(cell(col_mem, "peak_allocated_bytes", false));
  }
  if (header.empty())
    throw InputError(where, "is empty", "write a header line step,loss then one line per step");
  check_steps(r, where);
  drop_if_empty(r.tokens_per_s);
  drop_if_empty(r.peak_allocated);
  return r;
}

TrainingRun load_training_run(const std::string& path) {
  const std::string text =
      read_input_file(path, "a --metrics .jsonl, a step,loss .csv or a measured report .json");
  if (ends_with(path, ".csv")) return parse_training_csv(text, path);
  if (is_training_input(path)) return parse_metrics_jsonl(text, path);
  const nlohmann::json j = parse_json_text(text, path);
  auto it = j.find("loss_per_step");
  if (!j.is_object() || it == j.end() || !it->is_array())
    throw InputError(path + ": loss_per_step", "is missing",
                     "give a measured report (fullshard train --json) or the run's --metrics file");
  TrainingRun r;
  r.label = label_of(path);
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& v = (*it)[i];
    r.step.push_back(static_cast<double>(i + 1));
    r.loss.push_back(v.is_number() ? v.get<double>() : kNaN);
  }
  check_steps(r, path);
  return r;
}

}  // namespace fullshard::plot
