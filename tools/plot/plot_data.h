#pragma once
// Report JSON -> plot data: what the HTML page and the SVG draw (docs/plots.md).
// Reads any report with the documented `memory_timeline` keys (docs/report-format.md): a
// simulation's (`fullshard simulate --json`) or a real run's. Only `time_s` and
// `allocated_bytes` are required per timeline; everything else degrades gracefully.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fullshard::plot {

// A unit that makes the largest value read well: value / scale, printed with `name`.
struct Unit {
  std::string name;  // "GiB", "MiB", "KiB", "B"; "s", "ms", "us"
  double scale = 1;
};
// The largest binary unit not above max_bytes (so axis labels read 0 .. 27.04 GiB, not
// 0 .. 27689 MiB); B for 0.
Unit byte_unit(double max_bytes);
// s for spans of a second or more, ms from 1 ms, us below.
Unit time_unit(double span_s);
// "12.34 GiB", "512.0 MiB": the unit byte_unit picks, 2 decimals for GiB, 1 below.
std::string format_bytes(double bytes);
// About `target` round tick values (1, 2, 5 x 10^k steps) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target);

// Best guess of the module from an op or buffer name: "layers.3.attention.wq backward_input"
// -> "layers.3.attention.wq", "layers.3.attention.wq.weight (unsharded)" ->
// "layers.3.attention.wq", "layers.0 all_gather" -> "layers.0"; "" for names that are no
// module path ("load batch").
std::string module_of(const std::string& name);

struct InFlight {
  std::string stream, name;
  double start_s = 0, end_s = 0;
};

// One memory timeline: a rank class (or one rank) of one report. Points are the state after
// each allocation or free; the value holds until the next point (a step function).
struct Series {
  std::string label;  // "ranks 0-7", "rank 3"
  std::vector<int> ranks;
  std::vector<double> time_s;
  std::vector<double> allocated, reserved, host;  // reserved / host empty when not reported
  std::vector<std::string> categories;            // keys, in stacking order (bottom first)
  std::vector<std::vector<double>> by_category;   // parallel to categories, then to time_s
  // Optional label columns (empty when the report has none): indices into Report::names.
  std::vector<int32_t> what, op;
  std::vector<uint8_t> is_alloc;  // 1 alloc, 0 free; empty when not reported
  // Peak of allocated bytes (from rank_classes when the report has it, else the timeline).
  double peak_allocated = 0, peak_reserved = 0, peak_time_s = 0;
  std::vector<std::pair<std::string, double>> breakdown_at_peak;  // nonzero categories
  std::vector<InFlight> in_flight_at_peak;
  std::string oom;  // "" or one line: what failed to allocate, and the state then
  // Mixture of experts (empty for a dense model): the timeline's routed_tokens_bytes column
  // (NOTE [Routed tokens in the timeline] in core/report/rank_report.h), the class's
  // moe_at_peak (nonzero parts) and its all_to_all_spans.
  std::vector<double> routed;
  std::vector<std::pair<std::string, double>> moe_at_peak;
  std::vector<InFlight> all_to_all;
};

// A checkpoint save the simulator played (report "checkpoint.played", NOTE [Playing a
// checkpoint save]): the host's exposed wait and the write on the checkpoint lane, seconds.
struct CheckpointSpan {
  int step = 0;
  double save_begin_s = 0, save_end_s = 0, write_begin_s = 0, write_end_s = 0;
};

struct Report {
  std::string label;  // what the legend calls it: `label` / `source` key, else the file name
  std::string path;
  std::string scenario;
  int world_size = 0;
  double capacity_bytes = 0;       // 0: unknown
  std::string summary;             // one line: step time, MFU, ok / problems / OOM
  std::vector<std::string> names;  // label strings the series index
  std::vector<Series> series;
  std::vector<CheckpointSpan> checkpoint;  // drawn as a "checkpoint" lane along the time axis
};

// The categories' stacking order and colors (docs/plots.md); unknown keys go on top.
const std::vector<std::string>& known_categories();
std::string category_color(const std::string& key, size_t fallback_index);

// `where` names the input in errors (its path). Throws InputError for a report without a
// usable memory_timeline (missing keys, columns of different lengths, time going back).
Report parse_report(const nlohmann::json& j, const std::string& where);
// Reads and parses; InputError names the path when it cannot be read or is not JSON.
Report load_report(const std::string& path);

// Keeps at most about max_points (never fewer than 2 per bucket): each bucket's lowest and
// highest allocated point, plus the points of the allocated and reserved peaks, in time order.
// Label columns follow their points.
void downsample(Series& s, size_t max_points);

// For drawing `columns` pixel columns over [0, t_end]: keeps each column's first, last,
// lowest and highest allocated point (so a step plot of the result looks the same at that
// width), plus the allocated and reserved peaks.
void downsample_by_time(Series& s, double t_end, size_t columns);

// Index of the first point with the highest allocated bytes (0 for an empty series).
size_t peak_index(const Series& s);

// Cumulative tops of the stacked areas: result[k][i] = sum of the visible categories 0..k at
// point i (a hidden category repeats the top below it, so it draws as nothing).
std::vector<std::vector<double>> stack(const Series& s, const std::vector<bool>& visible);

// The series of `r` to compare with `s` of another report: the one containing s's first rank,
// else the same position, else none.
std::optional<size_t> matching_series(const Report& r, const Series& s, size_t position);

// The compact JSON the HTML page's script reads (NOTE [Page data] in plot_data.cc).
nlohmann::json page_data(const std::vector<Report>& reports);

}  // namespace fullshard::plot
