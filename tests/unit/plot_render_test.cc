// The HTML page and the SVG: self-contained (nothing fetched), data embedded safely, the
// peak, the OOM line and the overlays present. (tests/cli/plot_browser.sh opens the page in
// headless Chromium.)
#include <gtest/gtest.h>

#include <regex>

#include "core/common/error.h"
#include "tools/plot/plot.h"

namespace fullshard::plot {
namespace {

using nlohmann::json;

Report report(const std::string& label, double scale, bool oom = false) {
  json j = json::parse(R"J({
    "scenario": "demo", "world_size": 2, "capacity_bytes": 4294967296,
    "rank_classes": [{"ranks": [0], "peak_allocated_bytes": 0}, {"ranks": [1]}],
    "memory_timeline": [
      {"class": 0, "ranks": [0], "time_s": [0, 0.001, 0.002, 0.003], "allocated_bytes": [0, 0, 0, 0],
       "reserved_bytes": [0, 0, 0, 0], "by_category": {"activations": [0, 0, 0, 0], "temporaries": [0, 0, 0, 0]},
       "what": ["a </script><b>", "b & c", "b", "a"], "op": ["x", "y", "z", "w"], "event": ["alloc", "alloc", "free", "free"]},
      {"class": 1, "ranks": [1], "time_s": [0, 0.004], "allocated_bytes": [1, 2]}]})J");
  auto& tl = j["memory_timeline"][0];
  const double act[] = {1e9, 2e9, 1.5e9, 0.5e9}, tmp[] = {0, 5e8, 0, 0};
  for (int i = 0; i < 4; ++i) {
    tl["by_category"]["activations"][i] = act[i] * scale;
    tl["by_category"]["temporaries"][i] = tmp[i] * scale;
    tl["allocated_bytes"][i] = (act[i] + tmp[i]) * scale;
    tl["reserved_bytes"][i] = 3e9 * scale;
  }
  j["rank_classes"][0]["peak_allocated_bytes"] = 2.5e9 * scale;
  j["rank_classes"][0]["peak_time_s"] = 0.001;
  j["rank_classes"][0]["breakdown_at_peak"] = {{"activations", 2e9 * scale},
                                               {"temporaries", 5e8 * scale}};
  if (oom)
    j["rank_classes"][0]["oom"] = {{"requested_bytes", 1 << 30},
                                   {"what", "layers.1.ffn"},
                                   {"category", "activations"},
                                   {"capacity_bytes", 4294967296},
                                   {"step", 0},
                                   {"allocated_bytes", 3e9},
                                   {"reserved_bytes", 3.5e9}};
  j["label"] = label;
  return parse_report(j, label + ".json");
}

TEST(PlotHtml, SelfContainedWithEmbeddedData) {
  const std::string html = render_html({report("predicted", 1)});
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  // Nothing is fetched: no external scripts, styles, fonts or images.
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_EQ(html.find("url(http"), std::string::npos);
  std::regex remote(R"((src|href)\s*=\s*["']?(https?:)?//)");
  EXPECT_FALSE(std::regex_search(html, remote));
  EXPECT_EQ(html.find("__DATA__"), std::string::npos);
  EXPECT_EQ(html.find("__TITLE__"), std::string::npos);
  // A name holding "</script>" cannot end the data element early.
  EXPECT_EQ(html.find("a </script>"), std::string::npos);
  EXPECT_NE(html.find("a \\u003c/script>"), std::string::npos);
  // The embedded data parses back.
  const size_t b = html.find("id=\"plot-data\">") + 15, e = html.find("</script>", b);
  json data = json::parse(html.substr(b, e - b));
  EXPECT_EQ(data["reports"][0]["label"], "predicted");
  EXPECT_EQ(data["reports"][0]["series"].size(), 2u);
  EXPECT_EQ(data["initial_series"], 0);
  EXPECT_NE(html.find("<title>memory timeline: demo</title>"), std::string::npos);
}

TEST(PlotHtml, RankSelectsTheInitialSeries) {
  PlotOptions o;
  o.rank = 1;
  const std::string html = render_html({report("p", 1)}, o);
  EXPECT_NE(html.find("\"initial_series\":1"), std::string::npos);
  o.rank = 7;
  try {
    render_html({report("p", 1)}, o);
    FAIL() << "no error for a rank no timeline holds";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--rank"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("rank 0, rank 1"), std::string::npos) << e.what();
  }
}

TEST(PlotSvg, StackedAreasLinesPeakAndOverlay) {
  const std::string svg = render_svg({report("predicted", 1), report("measured", 1.1)});
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  // One area per category per panel (two panels: one per rank class).
  size_t areas = 0;
  for (size_t p = svg.find("class=\"area\""); p != std::string::npos;
       p = svg.find("class=\"area\"", p + 1))
    ++areas;
  EXPECT_EQ(areas, 2u);
  EXPECT_NE(svg.find("peak 2.33 GiB"), std::string::npos);  // 2.5e9 B
  EXPECT_NE(svg.find("peak 2.56 GiB"), std::string::npos);  // the overlaid report's peak
  EXPECT_NE(svg.find("capacity 4.00 GiB"), std::string::npos);
  EXPECT_NE(svg.find("time (ms)"), std::string::npos);
  EXPECT_NE(svg.find("memory (GiB)"), std::string::npos);
  EXPECT_NE(svg.find("activations 1.86 GiB (80%)"), std::string::npos)
      << "breakdown under the panel";
  EXPECT_EQ(svg.find("b & c"), std::string::npos);  // XML-escaped when shown
  // Balanced tags for the elements drawn (a cheap well-formedness check).
  auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t p = svg.find(s); p != std::string::npos; p = svg.find(s, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<g"), count("</g>"));
  EXPECT_EQ(count("<text"), count("</text>"));
}

TEST(PlotSvg, OutOfMemoryIsMarked) {
  PlotOptions o;
  o.rank = 0;
  const std::string svg = render_svg({report("oom", 1, true)}, o);
  EXPECT_NE(svg.find("OUT OF MEMORY</text>"), std::string::npos);
  EXPECT_NE(svg.find("OUT OF MEMORY in step 0 allocating 1.00 GiB for layers.1.ffn"),
            std::string::npos);
  EXPECT_EQ(svg.find("rank 1"), std::string::npos);  // --rank 0: that panel only
}

}  // namespace
}  // namespace fullshard::plot
