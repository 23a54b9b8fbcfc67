#include <fmt/format.h>

#include <algorithm>

#include "core/common/error.h"
#include "tools/plot/plot.h"

namespace fullshard::plot {

size_t selected_series(const Report& r, const PlotOptions& o) {
  if (!o.rank) return 0;
  for (size_t i = 0; i < r.series.size(); ++i) {
    const auto& rk = r.series[i].ranks;
    if (std::find(rk.begin(), rk.end(), *o.rank) != rk.end()) return i;
  }
  std::string have;
  for (const auto& s : r.series) have += (have.empty() ? "" : ", ") + s.label;
  throw InputError("--rank", fmt::format("is {}, which no timeline of {} holds", *o.rank, r.path),
                   "use a rank of one of its timelines: " + have);
}

namespace {

void replace_all(std::string& s, const std::string& what, const std::string& with) {
  for (size_t pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + with.size()))
    s.replace(pos, what.size(), with);
}

}  // namespace

std::string default_title(const std::vector<Report>& reports) {
  std::vector<std::string> names;
  for (const auto& r : reports) {
    const std::string n = r.scenario.empty() ? r.label : r.scenario;
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  std::string t;
  for (const auto& n : names) t += (t.empty() ? "" : " vs ") + n;
  return "memory timeline: " + t;
}

std::string render_html(std::vector<Report> reports, const PlotOptions& o) {
  FULLSHARD_CHECK(!reports.empty(), "render_html without reports");
  for (auto& r : reports)
    for (auto& s : r.series) downsample(s, o.max_points);
  nlohmann::json data = page_data(reports);
  data["initial_series"] = selected_series(reports.front(), o);
  // Inside <script type="application/json"> only "</script" could end the element early; '<'
  // appears in JSON only inside strings, where \u003c is the same character.
  std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  replace_all(json, "<", "\\u003c");
  std::string page = kHtmlTemplate;
  const std::string title = markup_escape(o.title.empty() ? default_title(reports) : o.title);
  replace_all(page, "__TITLE__", title);
  const size_t at = page.find("__DATA__", page.find("id=\"plot-data\""));
  FULLSHARD_CHECK(at != std::string::npos, "template without __DATA__");
  page.replace(at, 8, json);
  return page;
}

}  // namespace fullshard::plot
