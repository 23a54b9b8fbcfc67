#pragma once
// Calibration measurements as CSV (what a spreadsheet or a script over nccl-tests logs
// writes): one header row naming columns, then one sample per row. A row with a `collective`
// is an nccl-tests sample (columns collective, nodes, gpus_per_node, bytes, time_us or
// busbw_gbs); a row with an `op` is a kernel sample (op, dtype, out_dtype, flops, bytes, time_s,
// and a GEMM's m, k, n or attention's seq, head_dim). Empty
// cells are absent fields; lines starting with '#' and blank lines are skipped.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fullshard::sim {

struct CalibrationCsv {
  nlohmann::json measurements;        // {"collectives": [...], "kernels": [...]}
  std::vector<int> collective_lines;  // CSV line (1-based) of each collectives[i]
  std::vector<int> kernel_lines;      // CSV line of each kernels[i]
};

// Throws InputError naming the line and column for an unknown column, a row that is neither
// kind (or both), or a row with more cells than the header.
CalibrationCsv parse_calibration_csv(const std::string& text);

// "collectives[3].bytes" -> "line 5 (collectives[3].bytes)" using the line maps.
std::string csv_location(const CalibrationCsv& csv, const std::string& json_path);

}  // namespace fullshard::sim
