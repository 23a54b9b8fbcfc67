#include "runner/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace fullshard::runner {
namespace {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  int t = static_cast<int>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

}  // namespace

Progress::Progress(int steps, bool enabled)
    : steps_(steps), enabled_(enabled), tty_(isatty(STDERR_FILENO)) {}

void Progress::step(const StepSummary& s, double elapsed) {
  if (!enabled_) return;
  const int done = s.step + 1;
  const double eta = elapsed / done * (steps_ - done);
  std::string stats = fmt::format("loss {:.4f} | {:.0f} tok/s | {:.2f} s/step | ETA {}", s.loss,
                                  s.tokens_per_s, s.step_time_s, format_duration(eta));
  if (tty_) {
    const int width = 24, fill = steps_ > 0 ? width * done / steps_ : width;
    std::fprintf(stderr, "\r  step %d/%d [%s%s] %s   %s", done, steps_,
                 std::string(fill, '#').c_str(), std::string(width - fill, '.').c_str(),
                 stats.c_str(), done == steps_ ? "\n" : "");
  } else if (done == 1 || done == steps_ || done % std::max(1, steps_ / 10) == 0) {
    // Not a terminal (a log): about ten lines per run, not one per step.
    std::fprintf(stderr, "  step %d/%d: %s\n", done, steps_, stats.c_str());
  }
  if (!std::isnan(s.eval_loss)) {
    if (tty_ && done != steps_) std::fputc('\n', stderr);
    std::fprintf(stderr, "step %d: val loss %.4f\n", done, s.eval_loss);  // nanoGPT's line
  }
  std::fflush(stderr);
}

void Progress::interrupt() {
  if (enabled_ && tty_) std::fputc('\n', stderr);
}

}  // namespace fullshard::runner
