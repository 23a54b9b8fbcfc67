#include "tools/plot/training_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "tools/plot/plot.h"

namespace fullshard::plot {
namespace {

const char* const kColors[] = {"#111111", "#d6008f", "#0050b5", "#008a3e", "#8a5a00", "#5e35b1"};
const char* color(size_t i) { return kColors[i % 6]; }
constexpr double kWidth = 1000, kLeft = 80, kRight = 16, kPanel = 200, kGap = 56;

struct Metric {
  const char* title;
  std::function<const std::vector<double>&(const TrainingRun&)> values;
  std::function<std::string(double, double)> label;  // (value, tick step) -> text
  double scale = 1;                                  // value / scale is drawn
  bool from_zero = false;                            // the axis starts at 0 (rates, bytes)
  // Sparse values drawn dashed with dots over the same axis (the validation loss); may be null.
  std::function<const std::vector<double>&(const TrainingRun&)> sparse;
};

std::string plain_label(double v, double step) {
  const int d = std::clamp(static_cast<int>(-std::floor(std::log10(step) + 1e-9)), 0, 6);
  return fmt::format("{:.{}f}", v, d);
}

std::pair<double, double> range_of(const std::vector<TrainingRun>& runs, const Metric& m) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& r : runs) {
    for (double v : m.values(r))
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    if (m.sparse)
      for (double v : m.sparse(r))
        if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (!(hi >= lo)) return {0, 1};
  if (hi == lo)
    return {lo - (lo == 0 ? 1 : std::abs(lo) * 0.05), hi + (hi == 0 ? 1 : std::abs(hi) * 0.05)};
  return {lo, hi};
}

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

double first_finite(const std::vector<double>& v, bool from_end) {
  if (from_end) {
    for (auto it = v.rbegin(); it != v.rend(); ++it)
      if (std::isfinite(*it)) return *it;
  } else {
    for (double x : v)
      if (std::isfinite(x)) return x;
  }
  return NAN;
}

// NOTE [Per-op panel]: under the curves, for each run whose metrics carry a per-op table, its
// last table as horizontal bars: the kOpRows keys with the most time (measured or predicted),
// measured seconds solid in the run's colour and the simulator's predicted seconds as a grey
// bar beneath, on one seconds axis, so the keys the time model misprices stand out.
constexpr size_t kOpRows = 12;
constexpr double kOpRow = 22, kOpLabel = 300;

std::vector<OpTimes> top_ops(const TrainingRun& r) {
  std::vector<OpTimes> v = r.last_ops;
  const auto most = [](const OpTimes& o) {
    return std::max(o.measured_s, std::isfinite(o.predicted_s) ? o.predicted_s : 0.0);
  };
  std::stable_sort(v.begin(), v.end(),
                   [&](const OpTimes& a, const OpTimes& b) { return most(a) > most(b); });
  if (v.size() > kOpRows) v.resize(kOpRows);
  return v;
}

double ops_panel_height(const TrainingRun& r) {
  return r.last_ops.empty() ? 0 : static_cast<double>(top_ops(r).size()) * kOpRow + 40 + kGap;
}

std::string ops_panel(const TrainingRun& r, size_t i, double top) {
  const std::vector<OpTimes> rows = top_ops(r);
  if (rows.empty()) return "";
  double hi = 0, measured = 0, predicted = 0;
  bool any_pred = false;
  for (const auto& o : r.last_ops) {
    measured += o.measured_s;
    if (std::isfinite(o.predicted_s)) predicted += o.predicted_s, any_pred = true;
  }
  for (const auto& o : rows)
    hi = std::max({hi, o.measured_s, std::isfinite(o.predicted_s) ? o.predicted_s : 0.0});
  if (!(hi > 0)) hi = 1;
  const double x0 = kLeft + kOpLabel, w = kWidth - kRight - x0;
  std::string out = fmt::format(
      "<text x=\"{}\" y=\"{:.1f}\" font-weight=\"bold\">{}: per-op time of step {} (ms; solid: "
      "measured {:.3f} ms in all, "
      "grey: predicted {})</text>\n",
      kLeft, top - 8, markup_escape(r.label), static_cast<int>(r.last_ops_step), 1e3 * measured,
      any_pred ? fmt::format("{:.3f} ms", 1e3 * predicted) : std::string("none"));
  const double h = static_cast<double>(rows.size()) * kOpRow;
  const std::vector<double> ticks = nice_ticks(0, 1e3 * hi, 5);
  const double axis_hi = std::max(1e3 * hi, ticks.back());
  for (double t : ticks) {
    const double x = x0 + t / axis_hi * w;
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
        x, top, top + h, top + h + 16, plain_label(t, ticks.size() > 1 ? ticks[1] - ticks[0] : 1));
  }
  for (size_t k = 0; k < rows.size(); ++k) {
    const OpTimes& o = rows[k];
    const double y = top + static_cast<double>(k) * kOpRow;
    std::string label = o.key + " (" + o.kind + ")";
    if (label.size() > 46) label = label.substr(0, 43) + "...";
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", x0 - 6,
                       y + 14, markup_escape(label));
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"9\" fill=\"{}\"><title>measured "
        "{:.6f} s</title></rect>",
        x0, y + 2, 1e3 * o.measured_s / axis_hi * w, color(i), o.measured_s);
    if (std::isfinite(o.predicted_s))
      out += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"7\" "
          "fill=\"#aaa\"><title>predicted {:.6f} s</title></rect>",
          x0, y + 12, 1e3 * o.predicted_s / axis_hi * w, o.predicted_s);
    out += "\n";
  }
  return out;
}

}  // namespace

std::string default_training_title(const std::vector<TrainingRun>& runs) {
  std::string t = "training: ";
  for (size_t i = 0; i < runs.size(); ++i) t += (i ? " vs " : "") + runs[i].label;
  return t;
}

std::string render_training_svg(const std::vector<TrainingRun>& runs, const std::string& title) {
  std::vector<Metric> metrics;
  bool eval = false;
  for (const auto& r : runs) eval = eval || !r.eval_loss.empty();
  metrics.push_back({eval ? "loss (dashed, dots: validation loss)" : "loss",
                     [](const TrainingRun& r) -> const std::vector<double>& { return r.loss; },
                     plain_label});
  if (eval)
    metrics.back().sparse = [](const TrainingRun& r) -> const std::vector<double>& {
      return r.eval_loss;
    };
  bool tps = false, mem = false;
  double max_mem = 0;
  for (const auto& r : runs) {
    tps = tps || !r.tokens_per_s.empty();
    mem = mem || !r.peak_allocated.empty();
    for (double v : r.peak_allocated)
      if (std::isfinite(v)) max_mem = std::max(max_mem, v);
  }
  if (tps)
    metrics.push_back(
        {"tokens/s (all ranks)",
         [](const TrainingRun& r) -> const std::vector<double>& { return r.tokens_per_s; },
         plain_label, 1, true});
  const Unit mu = byte_unit(max_mem);
  if (mem)
    metrics.push_back(
        {nullptr,
         [](const TrainingRun& r) -> const std::vector<double>& { return r.peak_allocated; },
         plain_label, mu.scale, true});
  double s0 = INFINITY, s1 = -INFINITY;
  for (const auto& r : runs)
    for (double s : r.step) s0 = std::min(s0, s), s1 = std::max(s1, s);
  if (!(s1 > s0)) s1 = s0 + 1;
  const double legend_h = 18.0 * static_cast<double>(runs.size());
  const double top0 = 40 + legend_h + 12;
  double ops_h = 0;
  for (const auto& r : runs) ops_h += ops_panel_height(r);
  const double height = top0 + static_cast<double>(metrics.size()) * (kPanel + kGap) + ops_h + 8;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1:.0f}\" viewBox=\"0 0 "
      "{0} {1:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"#fff\"/>\n"
      "<text x=\"{2}\" y=\"24\" font-size=\"16\" font-weight=\"bold\">{3}</text>\n",
      kWidth, height, kLeft, markup_escape(title));
  for (size_t i = 0; i < runs.size(); ++i) {
    const double y = 44 + 18.0 * static_cast<double>(i);
    const double last = first_finite(runs[i].loss, true);
    const double last_eval = first_finite(runs[i].eval_loss, true);
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"2\"/>"
        "<text x=\"{4}\" y=\"{5:.1f}\">{6} ({7} steps, last loss {8}{9})</text>\n",
        kLeft, y - 4, kLeft + 24, color(i), kLeft + 30, y, markup_escape(runs[i].label),
        runs[i].step.size(), std::isfinite(last) ? fmt::format("{:.4f}", last) : "none",
        std::isfinite(last_eval) ? fmt::format(", last validation loss {:.4f}", last_eval) : "");
  }
  const double w = kWidth - kLeft - kRight;
  for (size_t p = 0; p < metrics.size(); ++p) {
    const Metric& m = metrics[p];
    const double top = top0 + static_cast<double>(p) * (kPanel + kGap);
    auto [lo, hi] = range_of(runs, m);
    lo /= m.scale, hi /= m.scale;
    if (m.from_zero) lo = std::min(lo, 0.0);
    const std::vector<double> ticks = nice_ticks(lo, hi, 5);
    const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : std::max(hi - lo, 1e-9);
    lo = std::min(lo, ticks.front());
    hi = std::max(hi, ticks.back());
    if (!(hi > lo)) hi = lo + 1;
    const auto X = [&](double s) { return kLeft + (s - s0) / (s1 - s0) * w; };
    const auto Y = [&](double v) { return top + kPanel - (v - lo) / (hi - lo) * kPanel; };
    const std::string name = m.title ? m.title : "peak allocated (" + mu.name + ")";
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-weight=\"bold\">{}</text>\n", kLeft,
                       top - 8, markup_escape(name));
    out += fmt::format(
        "<rect x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n",
        kLeft, top, w, kPanel);
    for (double t : ticks) {
      out += fmt::format(
          "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#eee\"/>"
          "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
          kLeft, Y(t), kLeft + w, Y(t), kLeft - 6, Y(t) + 4, m.label(t, step));
    }
    for (double t : nice_ticks(s0, s1, 10))
      out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", X(t),
                         top + kPanel + 16, plain_label(t, std::max(1.0, (s1 - s0) / 10)));
    out += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#555\">step</text>\n",
        kLeft + w / 2, top + kPanel + 32);
    for (size_t i = 0; i < runs.size(); ++i) {
      const auto& v = m.values(runs[i]);
      std::string d;
      bool pen = false;
      for (size_t k = 0; k < v.size() && k < runs[i].step.size(); ++k) {
        if (!std::isfinite(v[k])) {
          pen = false;  // a gap: an absent or diverged value
          continue;
        }
        d += fmt::format("{}{:.1f},{:.1f}", pen ? "L" : "M", X(runs[i].step[k]), Y(v[k] / m.scale));
        pen = true;
      }
      if (!d.empty())
        out += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>\n", d,
                           color(i));
      if (!m.sparse) continue;
      // The validation loss: one dot per evaluation, joined by a dashed line across the steps
      // between.
      const auto& e = m.sparse(runs[i]);
      std::string ed, dots;
      for (size_t k = 0; k < e.size() && k < runs[i].step.size(); ++k) {
        if (!std::isfinite(e[k])) continue;
        const double x = X(runs[i].step[k]), y = Y(e[k] / m.scale);
        ed += fmt::format("{}{:.1f},{:.1f}", ed.empty() ? "M" : "L", x, y);
        dots += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>", x, y,
                            color(i));
      }
      if (!ed.empty())
        out += fmt::format(
            "<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" stroke-dasharray=\"6 "
            "4\"/>{}\n",
            ed, color(i), dots);
    }
  }
  double ops_top = top0 + static_cast<double>(metrics.size()) * (kPanel + kGap) + 12;
  for (size_t i = 0; i < runs.size(); ++i) {
    out += ops_panel(runs[i], i, ops_top);
    ops_top += ops_panel_height(runs[i]);
  }
  return out + "</svg>\n";
}

std::string render_training_html(const std::vector<TrainingRun>& runs, const std::string& title) {
  std::string rows;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    const auto num = [](double v, const char* f) {
      return std::isfinite(v) ? fmt::format(fmt::runtime(f), v) : "-";
    };
    double peak = NAN;
    for (double v : r.peak_allocated)
      if (std::isfinite(v)) peak = std::isfinite(peak) ? std::max(peak, v) : v;
    rows += fmt::format(
        "<tr><td "
        "style=\"color:{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        color(i), markup_escape(r.label), r.step.size(), num(first_finite(r.loss, false), "{:.4f}"),
        num(first_finite(r.loss, true), "{:.4f}"), num(median(r.tokens_per_s), "{:.0f}"),
        std::isfinite(peak) ? format_bytes(peak) : "-");
  }
  return fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{0}</title>\n"
      "<style>body{{font-family:sans-serif;margin:16px}} "
      "table{{border-collapse:collapse;margin:12px 0}} "
      "td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}} "
      "td:first-child{{text-align:left}}</style>"
      "</head><body>\n<table><tr><th>run</th><th>steps</th><th>first loss</th><th>last loss</th>"
      "<th>median tokens/s</th><th>peak allocated</th></tr>\n{1}</table>\n{2}</body></html>\n",
      markup_escape(title), rows, render_training_svg(runs, title));
}

}  // namespace fullshard::plot
