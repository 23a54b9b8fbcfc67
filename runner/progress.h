#pragma once
// The launcher's progress display on stderr: a bar redrawn in place on a terminal, about ten
// lines otherwise (a log), and nanoGPT's "step N: val loss X" line after a validation pass.
#include "runner/step_aggregation.h"

namespace fullshard::runner {

class Progress {
 public:
  Progress(int steps, bool enabled);
  // Step `s` is complete, `elapsed_s` seconds into the run.
  void step(const StepSummary& s, double elapsed_s);
  // Ends the in-place line before something else is printed.
  void interrupt();

 private:
  int steps_;
  bool enabled_;
  bool tty_;
};

}  // namespace fullshard::runner
