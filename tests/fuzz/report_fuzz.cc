// Fuzz target: a report JSON as `fullshard plot R.json -o OUT.svg` reads it (simulated or
// measured), rendered as SVG too: the renderer walks every series the parser accepted.
#include "core/common/json_file.h"
#include "tests/fuzz/fuzz_support.h"
#include "tools/plot/plot.h"
#include "tools/plot/plot_data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fullshard;
  fuzz::expect_parse_or_input_error([&] {
    std::vector<plot::Report> reports;
    reports.push_back(
        plot::parse_report(parse_json_text(fuzz::text(data, size), "r.json"), "r.json"));
    plot::render_svg(std::move(reports));
  });
  return 0;
}
