#pragma once
// Memory timeline pictures from report JSON (docs/plots.md): a self-contained interactive HTML
// page (inline script + SVG, nothing fetched) and a static SVG.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "tools/plot/plot_data.h"

namespace fullshard::plot {

struct PlotOptions {
  std::optional<int> rank;   // show the series holding this rank first (HTML) / only (SVG)
  size_t max_points = 4000;  // per series (HTML); the SVG keeps about 2 per pixel column
  std::string title;         // default: the scenarios' names
};

// "memory timeline: llama3.1-8b-fsdp8-h100 vs ..." (the scenarios, else the labels).
std::string default_title(const std::vector<Report>& reports);

// Index of the series of `r` that `o.rank` selects; InputError (--rank) when no series holds it.
size_t selected_series(const Report& r, const PlotOptions& o);

// &, <, > and " as entities: text safe inside HTML / SVG elements and attributes.
std::string markup_escape(const std::string& s);

std::string render_html(std::vector<Report> reports, const PlotOptions& o = {});
std::string render_svg(std::vector<Report> reports, const PlotOptions& o = {});

// The page's HTML/CSS/JS with __TITLE__ and __DATA__ placeholders (html_template.cc).
extern const char* const kHtmlTemplate;

}  // namespace fullshard::plot
