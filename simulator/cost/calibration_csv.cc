#include "simulator/cost/calibration_csv.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/common/error.h"

namespace fullshard::sim {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) cells.push_back(trim(cell));
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

// A cell as JSON: a number when it parses completely as one, else a string.
// NOTE [Finite CSV numbers]: strtod also reads "nan", "inf", "infinity" and overflows
// ("1e999") to infinity; JSON has none of these, and the fit downstream would divide by them
// or convert them to integers (undefined behaviour). They are refused here, naming the cell.
nlohmann::json cell_value(const std::string& s, int line, const std::string& column) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() && *end == '\0') {
    if (!std::isfinite(v))
      throw InputError("line " + std::to_string(line) + " column " + column,
                       "is '" + s + "', not a finite number",
                       "write a finite number such as 2900 or 1.5e9");
    return v;
  }
  return s;
}

const std::vector<std::string> kCollectiveColumns = {"collective", "nodes",   "gpus_per_node",
                                                     "bytes",      "time_us", "busbw_gbs"};
const std::vector<std::string> kKernelColumns = {"op",    "dtype",  "out_dtype", "flops",
                                                 "bytes", "time_s", "m",         "n",
                                                 "k",     "seq",    "head_dim",  "params"};

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

CalibrationCsv parse_calibration_csv(const std::string& text) {
  CalibrationCsv out;
  out.measurements = {{"collectives", nlohmann::json::array()},
                      {"kernels", nlohmann::json::array()}};
  std::vector<std::string> header;
  std::stringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    const auto cells = split(t);
    if (header.empty()) {
      header = cells;
      for (const auto& c : header)
        if (!has(kCollectiveColumns, c) && !has(kKernelColumns, c))
          throw InputError("line " + std::to_string(number), "has the unknown column '" + c + "'",
                           "use collective, nodes, gpus_per_node, bytes, time_us, busbw_gbs "
                           "(nccl-tests samples) "
                           "and op, dtype, flops, time_s (kernel samples)");
      continue;
    }
    if (cells.size() > header.size())
      throw InputError("line " + std::to_string(number),
                       "has " + std::to_string(cells.size()) + " cells but the header names " +
                           std::to_string(header.size()),
                       "give one cell per header column");
    nlohmann::json row = nlohmann::json::object();
    for (size_t i = 0; i < cells.size(); ++i)
      if (!cells[i].empty()) row[header[i]] = cell_value(cells[i], number, header[i]);
    const bool coll = row.contains("collective"), kern = row.contains("op");
    if (coll == kern)
      throw InputError(
          "line " + std::to_string(number),
          coll ? "gives both a collective and an op" : "gives neither a collective nor an op",
          "one sample per row: an nccl-tests line (collective) or a kernel timing (op)");
    nlohmann::json sample = nlohmann::json::object();
    for (auto& [k, v] : row.items())
      if (has(coll ? kCollectiveColumns : kKernelColumns, k))
        sample[k] = v;
      else
        throw InputError(
            "line " + std::to_string(number) + " column " + k,
            "is not a field of a " + std::string(coll ? "collective" : "kernel") + " sample",
            "leave it empty on this row");
    if (coll) {
      out.measurements["collectives"].push_back(sample);
      out.collective_lines.push_back(number);
    } else {
      out.measurements["kernels"].push_back(sample);
      out.kernel_lines.push_back(number);
    }
  }
  return out;
}

std::string csv_location(const CalibrationCsv& csv, const std::string& path) {
  for (const auto& [prefix, lines] : {std::pair{std::string("collectives["), &csv.collective_lines},
                                      std::pair{std::string("kernels["), &csv.kernel_lines}}) {
    if (path.rfind(prefix, 0) != 0) continue;
    const size_t i = std::strtoul(path.c_str() + prefix.size(), nullptr, 10);
    if (i < lines->size()) return "line " + std::to_string((*lines)[i]) + " (" + path + ")";
  }
  return path;
}

}  // namespace fullshard::sim
