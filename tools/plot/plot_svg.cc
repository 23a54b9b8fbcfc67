// The static SVG: the same picture as the HTML page's default view, for papers and CI
// artifacts. One panel per rank class (or only the --rank one); other reports overlay their
// allocated / reserved lines (same scenario) or get panels of their own (different scenarios);
// under each panel, every shown series' peak with its breakdown and the ops in flight.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/common/error.h"
#include "tools/plot/plot.h"

namespace fullshard::plot {
namespace {

const char* const kOverlayColors[] = {"#111111", "#d6008f", "#0050b5",
                                      "#008a3e", "#8a5a00", "#5e35b1"};
const char* overlay_color(size_t i) { return kOverlayColors[i % 6]; }

std::string fmt_time(double s) {
  Unit u = time_unit(std::abs(s));
  if (u.name == "s" || u.name == "ms") return fmt::format("{:.3f} {}", s / u.scale, u.name);
  return fmt::format("{:.1f} {}", s / u.scale, u.name);
}

std::string tick_label(double v, double step) {
  const int d = std::clamp(static_cast<int>(-std::floor(std::log10(step) + 1e-9)), 0, 6);
  return fmt::format("{:.{}f}", v, d);
}

struct Frame {
  double left, top, width, height;  // the plot area
  double t1, ymax;                  // domain [0, t1] x [0, ymax]
  double x(double t) const { return left + t / t1 * width; }
  double y(double b) const { return top + height - b / ymax * height; }
};

std::string step_path(const std::vector<double>& ts, const std::vector<double>& ys,
                      const Frame& f) {
  if (ts.empty()) return "";
  std::string d = fmt::format("M{:.1f},{:.1f}", f.x(ts[0]), f.y(ys[0]));
  for (size_t i = 1; i < ts.size(); ++i) d += fmt::format("H{:.1f}V{:.1f}", f.x(ts[i]), f.y(ys[i]));
  return d;
}

std::string area_path(const std::vector<double>& ts, const std::vector<double>& top,
                      const std::vector<double>& bottom, const Frame& f) {
  std::string d = step_path(ts, top, f);
  const size_t n = ts.size();
  d += fmt::format("V{:.1f}", f.y(bottom[n - 1]));
  for (size_t i = n - 1; i > 0; --i)
    d += fmt::format("H{:.1f}V{:.1f}", f.x(ts[i]), f.y(bottom[i - 1]));
  return d + fmt::format("H{:.1f}Z", f.x(ts[0]));
}

struct Shown {
  const Series* series;
  const Report* report;
  std::string color;  // its line color (the first report's lines are black)
};

struct Panel {
  std::string title;
  std::vector<Shown> shown;  // shown[0] draws areas; the others overlay lines
};

// A white outline behind labels drawn over the areas.
const char* const kHalo =
    "stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\" stroke-linejoin=\"round\"";
constexpr double kWidth = 1000, kPlotHeight = 300, kLine = 15;
constexpr double kLeft = 72, kRight = 16;

// Lines of text under a panel: each shown series' peak, breakdown and ops in flight.
std::vector<std::pair<std::string, std::string>> notes(const Panel& p) {
  std::vector<std::pair<std::string, std::string>> out;  // (color, text)
  for (const auto& sh : p.shown) {
    const Series& s = *sh.series;
    std::string head = fmt::format("{}{}: peak allocated {} at {}",
                                   p.shown.size() > 1 ? sh.report->label + " \u00b7 " : "", s.label,
                                   format_bytes(s.peak_allocated), fmt_time(s.peak_time_s));
    if (s.peak_reserved > 0) head += ", peak reserved " + format_bytes(s.peak_reserved);
    out.emplace_back(sh.color, head);
    if (!s.oom.empty()) out.emplace_back("#d62728", s.oom);
    std::string bd;
    for (const auto& [k, v] : s.breakdown_at_peak) {
      std::string item = fmt::format("{} {} ({:.0f}%)", k, format_bytes(v),
                                     s.peak_allocated > 0 ? 100 * v / s.peak_allocated : 0.0);
      if (bd.size() + item.size() > 130) {
        out.emplace_back("#444", "    " + bd);
        bd.clear();
      }
      bd += (bd.empty() ? "" : ", ") + item;
    }
    if (!bd.empty()) out.emplace_back("#444", "    " + bd);
    std::string moe;
    for (const auto& [k, v] : s.moe_at_peak)
      moe += fmt::format("{}{} {}", moe.empty() ? "" : ", ", k, format_bytes(v));
    if (!moe.empty()) out.emplace_back("#9467bd", "    of which mixture of experts: " + moe);
    for (size_t i = 0; i < s.in_flight_at_peak.size() && i < 4; ++i) {
      const auto& f = s.in_flight_at_peak[i];
      out.emplace_back("#444", fmt::format("    {} {}: {} ({} \u2013 {})",
                                           i ? "            and on" : "in flight on", f.stream,
                                           f.name, fmt_time(f.start_s), fmt_time(f.end_s)));
    }
    if (s.in_flight_at_peak.empty() && !s.op.empty()) {
      auto it = std::upper_bound(s.time_s.begin(), s.time_s.end(), s.peak_time_s);
      const size_t i = it == s.time_s.begin() ? 0 : static_cast<size_t>(it - s.time_s.begin()) - 1;
      if (s.op[i] >= 0)
        out.emplace_back("#444",
                         "    op at the peak: " + sh.report->names[static_cast<size_t>(s.op[i])]);
    }
  }
  return out;
}

void draw_panel(std::string& svg, const Panel& p, double top, double t1, double ymax,
                double capacity, bool cap_shown, int clip_id) {
  const Frame f{kLeft, top + 20, kWidth - kLeft - kRight, kPlotHeight - 20, t1, ymax};
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"600\" font-size=\"13\">{}</text>\n",
                     kLeft, top + 13, markup_escape(p.title));
  svg += fmt::format(
      "<clipPath id=\"c{}\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/></clipPath>\n",
      clip_id, f.left, f.top, f.width, f.height);
  // axes: ticks in the units that fit
  const Unit bu = byte_unit(ymax / 1.06), tu = time_unit(t1);
  const auto yt = nice_ticks(0, ymax / bu.scale, 6);
  const double ys = yt.size() > 1 ? yt[1] - yt[0] : 1;
  svg += "<g font-size=\"11\" fill=\"#444\">\n";
  for (double v : yt) {
    const double py = f.y(v * bu.scale);
    if (py < f.top - 0.5) continue;
    svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>",
                       f.left, f.left + f.width, py, py);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", f.left - 6,
                       py + 4, tick_label(v, ys));
  }
  const auto xt = nice_ticks(0, t1 / tu.scale, 8);
  const double xs = xt.size() > 1 ? xt[1] - xt[0] : 1;
  for (double v : xt) {
    const double px = f.x(v * tu.scale);
    svg += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\" stroke=\"#ddd\"/>",
                       px, px, f.top, f.top + f.height);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px,
                       f.top + f.height + 14, tick_label(v, xs));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">time ({})</text>\n",
                     f.left + f.width / 2, f.top + f.height + 28, tu.name);
  const double my = f.top + f.height / 2;
  svg += fmt::format(
      "<text x=\"14\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">memory "
      "({})</text>\n",
      my, my, bu.name);
  svg += fmt::format("<path d=\"M{},{}V{}H{}\" stroke=\"#888\" fill=\"none\"/>\n</g>\n", f.left,
                     f.top, f.top + f.height, f.left + f.width);
  // areas of the first series, lines of all
  svg += fmt::format("<g clip-path=\"url(#c{})\">\n", clip_id);
  const Series& s = *p.shown[0].series;
  if (!s.time_s.empty()) {
    const auto tops = stack(s, {});
    std::vector<double> zero(s.time_s.size(), 0);
    for (size_t k = 0; k < s.categories.size(); ++k)
      svg += fmt::format("<path class=\"area\" fill=\"{}\" d=\"{}\"><title>{}</title></path>\n",
                         category_color(s.categories[k], k),
                         area_path(s.time_s, tops[k], k ? tops[k - 1] : zero, f),
                         markup_escape(s.categories[k]));
  }
  for (size_t i = 0; i < p.shown.size(); ++i) {
    const Series& o = *p.shown[i].series;
    const std::string& c = p.shown[i].color;
    if (!o.reserved.empty())
      svg += fmt::format(
          "<path fill=\"none\" stroke=\"{}\" stroke-width=\"1.2\" stroke-dasharray=\"5 3\" "
          "d=\"{}\"/>\n",
          i ? c : "#666", step_path(o.time_s, o.reserved, f));
    svg += fmt::format("<path fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" d=\"{}\"/>\n", c,
                       i ? 1.8 : 1.2, step_path(o.time_s, o.allocated, f));
  }
  // The routed tokens (NOTE [Routed tokens in the timeline] in core/report/rank_report.h).
  if (!s.routed.empty())
    svg += fmt::format(
        "<path class=\"routed\" fill=\"none\" stroke=\"#9467bd\" stroke-width=\"1.6\" "
        "stroke-dasharray=\"2 2\" d=\"{}\"/>\n",
        step_path(s.time_s, s.routed, f));
  // The all-to-all lane: expert parallelism's spans, under the checkpoint lane.
  const double a2a_y = f.top + (p.shown[0].report->checkpoint.empty() ? 0 : 22);
  for (const InFlight& a : s.all_to_all)
    svg += fmt::format(
        "<rect class=\"a2a\" x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"6\" "
        "fill=\"#8c564b\"><title>{}</title></rect>\n",
        f.x(a.start_s), a2a_y, std::max(1.0, f.x(a.end_s) - f.x(a.start_s)), markup_escape(a.name));
  if (!s.all_to_all.empty())
    svg += fmt::format(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"10\" fill=\"#444\" "
        "{}>all-to-all</text>\n",
        f.left + f.width - 4, a2a_y + 17, kHalo);
  // The checkpoint lane (NOTE [Playing a checkpoint save]): each played save's write (light)
  // and the time the host waited for it (dark), in a strip along the top of the plot.
  for (const CheckpointSpan& c : p.shown[0].report->checkpoint) {
    svg += fmt::format(
        "<rect class=\"ck-write\" x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"8\" "
        "fill=\"#aaa\"><title>checkpoint "
        "write after step {}</title></rect>\n",
        f.x(c.write_begin_s), f.top, std::max(1.0, f.x(c.write_end_s) - f.x(c.write_begin_s)),
        c.step);
    svg += fmt::format(
        "<rect class=\"ck-save\" x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"8\" "
        "fill=\"#444\"><title>checkpoint "
        "save after step {}: training waits</title></rect>\n",
        f.x(c.save_begin_s), f.top, std::max(1.0, f.x(c.save_end_s) - f.x(c.save_begin_s)), c.step);
  }
  if (!p.shown[0].report->checkpoint.empty())
    svg += fmt::format(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"10\" fill=\"#444\" "
        "{}>checkpoint</text>\n",
        f.left + f.width - 4, f.top + 19, kHalo);
  svg += "</g>\n";
  if (capacity > 0 && cap_shown) {
    const double cy = f.y(capacity);
    svg += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#d62728\" "
        "stroke-width=\"1.5\" stroke-dasharray=\"8 4\"/>",
        f.left, f.left + f.width, cy, cy);
    svg += fmt::format(
        "<text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" fill=\"#d62728\" {}>capacity {}</text>\n",
        f.left + 6, cy - 4, kHalo, format_bytes(capacity));
  } else if (capacity > 0) {
    svg += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#d62728\" {}>capacity {} (off "
        "scale)</text>\n",
        f.left + 6, f.top + 12, kHalo, format_bytes(capacity));
  }
  for (size_t i = 0; i < p.shown.size(); ++i) {
    const Series& o = *p.shown[i].series;
    if (!(o.peak_allocated > 0)) continue;
    const double px = f.x(o.peak_time_s), py = f.y(o.peak_allocated);
    const bool right = px < f.left + f.width * 0.7;
    svg += fmt::format(
        "<g class=\"peak\"><line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2}\" "
        "stroke=\"#111\" stroke-dasharray=\"2 2\"/>"
        "<circle cx=\"{0:.1f}\" cy=\"{1:.1f}\" r=\"4\" fill=\"{3}\"/>"
        "<text x=\"{4:.1f}\" y=\"{5:.1f}\" text-anchor=\"{6}\" font-size=\"11\" "
        "font-weight=\"600\" fill=\"{3}\" {8}>peak {7}</text></g>\n",
        px, py, f.top + f.height, p.shown[i].color, px + (right ? 7 : -7),
        std::max(f.top + 11, py - 6 - 13.0 * i), right ? "start" : "end",
        markup_escape(format_bytes(o.peak_allocated)), kHalo);
  }
  if (!s.oom.empty() && !s.time_s.empty()) {
    const double px = std::min(f.x(s.time_s.back()), f.left + f.width - 2);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#d62728\" "
        "stroke-width=\"1.5\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\" font-size=\"12\" "
        "font-weight=\"700\" fill=\"#d62728\" {5}>OUT OF MEMORY</text>\n",
        px, f.top, f.top + f.height, px - 6, f.top + f.height * 0.45, kHalo);
  }
  double ny = top + kPlotHeight + 46;
  for (const auto& [color, text] : notes(p)) {
    svg += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-size=\"12\" fill=\"{}\" xml:space=\"preserve\">{}</text>\n",
        kLeft, ny, color, markup_escape(text));
    ny += kLine;
  }
}

}  // namespace

std::string render_svg(std::vector<Report> reports, const PlotOptions& o) {
  FULLSHARD_CHECK(!reports.empty(), "render_svg without reports");
  // Per pixel column (NOTE [Downsampling] in plot_data.cc) over the shared time axis.
  double t_end = 0;
  for (const auto& r : reports)
    for (const auto& s : r.series)
      if (!s.time_s.empty()) t_end = std::max(t_end, s.time_s.back());
  for (auto& r : reports)
    for (auto& s : r.series)
      downsample_by_time(s, t_end, static_cast<size_t>(kWidth - kLeft - kRight));
  // Panels: the first report's series (or the --rank one); others overlay or stand alone.
  bool same = std::all_of(reports.begin(), reports.end(),
                          [&](const Report& r) { return r.scenario == reports[0].scenario; });
  std::vector<size_t> firsts;
  if (o.rank)
    firsts.push_back(selected_series(reports[0], o));
  else
    for (size_t i = 0; i < reports[0].series.size(); ++i) firsts.push_back(i);
  std::vector<Panel> panels;
  for (size_t pos : firsts) {
    const Series& s0 = reports[0].series[pos];
    Panel p{reports.size() > 1 && same ? s0.label : "", {{&s0, &reports[0], overlay_color(0)}}};
    if (reports.size() > 1 && !same)
      p.title = reports[0].label + " \u00b7 " + s0.label;
    else if (reports.size() == 1)
      p.title = s0.label;
    std::vector<Panel> others;
    for (size_t ri = 1; ri < reports.size(); ++ri) {
      auto m = matching_series(reports[ri], s0, pos);
      if (!m) continue;
      Shown sh{&reports[ri].series[*m], &reports[ri], overlay_color(ri)};
      if (same)
        p.shown.push_back(sh);
      else
        others.push_back(Panel{reports[ri].label + " \u00b7 " + sh.series->label,
                               {{sh.series, sh.report, overlay_color(0)}}});
    }
    panels.push_back(p);
    panels.insert(panels.end(), others.begin(), others.end());
  }
  // Shared scales: time to the longest series, memory to the highest line.
  double t1 = 0, ymax = 0, cap = 0;
  for (const auto& p : panels)
    for (const auto& sh : p.shown) {
      const Series& s = *sh.series;
      if (!s.time_s.empty()) t1 = std::max(t1, s.time_s.back());
      ymax = std::max({ymax, s.peak_allocated, s.peak_reserved});
      for (double v : s.allocated) ymax = std::max(ymax, v);
      for (double v : s.reserved) ymax = std::max(ymax, v);
      cap = std::max(cap, sh.report->capacity_bytes);
    }
  if (!(t1 > 0)) t1 = 1;
  const bool cap_shown = cap > 0 && cap <= 1.5 * ymax;
  ymax = std::max(cap_shown ? cap : ymax, 1.0) * 1.06;

  // Legend rows and heights first (the SVG needs its total height up front).
  std::vector<std::string> cats;
  for (const auto& p : panels)
    for (const auto& c : p.shown[0].series->categories)
      if (std::find(cats.begin(), cats.end(), c) == cats.end()) cats.push_back(c);
  std::vector<double> heights;
  double total = 70;
  for (const auto& p : panels) {
    heights.push_back(kPlotHeight + 50 + kLine * static_cast<double>(notes(p).size()));
    total += heights.back();
  }
  std::string
      svg;  // the body; the <svg> element (which needs the total height) goes first at the end
  const std::string title = o.title.empty() ? default_title(reports) : o.title;
  svg += fmt::format("<text x=\"{}\" y=\"20\" font-size=\"16\" font-weight=\"600\">{}</text>\n",
                     kLeft, markup_escape(title));
  double ly = 38;
  for (size_t ri = 0; ri < reports.size(); ++ri, ly += 16) {
    const Report& r = reports[ri];
    std::string line = r.label;
    if (!r.scenario.empty() && r.scenario != r.label) line += ": " + r.scenario;
    if (r.world_size > 0) line += fmt::format(", {} ranks", r.world_size);
    if (r.capacity_bytes > 0) line += ", capacity " + format_bytes(r.capacity_bytes);
    if (!r.summary.empty()) line += " (" + r.summary + ")";
    svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" fill=\"{}\">{}</text>\n", kLeft,
                       ly, overlay_color(ri), markup_escape(line));
  }
  ly -= 6;
  // The legend wraps (text width estimated at 6.6 px per character of 12 px sans-serif).
  double lx = kLeft;
  auto room = [&](double w) {
    if (lx + w > kWidth - kRight) {
      lx = kLeft;
      ly += 17;
    }
  };
  svg += "<g font-size=\"12\">";
  for (size_t k = 0; k < cats.size(); ++k) {
    const double w = 24 + 6.6 * static_cast<double>(cats[k].size());
    room(w);
    svg += fmt::format(
        "<rect x=\"{:.0f}\" y=\"{}\" width=\"11\" height=\"11\" fill=\"{}\"/><text x=\"{:.0f}\" "
        "y=\"{}\">{}</text>",
        lx, ly, category_color(cats[k], k), lx + 15, ly + 10, markup_escape(cats[k]));
    lx += w;
  }
  room(170);
  svg += fmt::format(
      "<line x1=\"{0:.0f}\" x2=\"{1:.0f}\" y1=\"{6}\" y2=\"{6}\" stroke=\"#111\" "
      "stroke-width=\"1.5\"/><text x=\"{2:.0f}\" y=\"{7}\">allocated</text>"
      "<line x1=\"{3:.0f}\" x2=\"{4:.0f}\" y1=\"{6}\" y2=\"{6}\" stroke=\"#666\" "
      "stroke-dasharray=\"5 3\"/><text x=\"{5:.0f}\" y=\"{7}\">reserved</text>",
      lx, lx + 20, lx + 24, lx + 90, lx + 110, lx + 114, ly + 6, ly + 10);
  lx += 170;
  if (std::any_of(panels.begin(), panels.end(),
                  [](const Panel& p) { return !p.shown[0].series->routed.empty(); })) {
    room(250);
    svg += fmt::format(
        "<line x1=\"{:.0f}\" x2=\"{:.0f}\" y1=\"{}\" y2=\"{}\" stroke=\"#9467bd\" "
        "stroke-width=\"1.6\" stroke-dasharray=\"2 2\"/><text x=\"{:.0f}\" y=\"{}\">routed "
        "tokens (sized by the router)</text>",
        lx, lx + 20, ly + 6, ly + 6, lx + 24, ly + 10);
    lx += 250;
  }
  if (std::any_of(panels.begin(), panels.end(),
                  [](const Panel& p) { return !p.shown[0].series->all_to_all.empty(); })) {
    room(100);
    svg += fmt::format(
        "<rect x=\"{:.0f}\" y=\"{}\" width=\"11\" height=\"11\" fill=\"#8c564b\"/><text "
        "x=\"{:.0f}\" y=\"{}\">all-to-all</text>",
        lx, ly, lx + 15, ly + 10);
    lx += 100;
  }
  svg += "</g>\n";
  double y = ly + 22;
  total += y - 70;
  for (size_t i = 0; i < panels.size(); ++i) {
    draw_panel(svg, panels[i], y, t1, ymax, cap, cap_shown, static_cast<int>(i));
    y += heights[i];
  }
  return fmt::format(
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1:.0f}\" "
             "viewBox=\"0 0 {0} {1:.0f}\" "
             "font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n",
             kWidth, total) +
         svg + "</svg>\n";
}

}  // namespace fullshard::plot
