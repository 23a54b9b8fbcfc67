#include "backends/cuda/stream_times.h"

#include <algorithm>

#include "core/common/error.h"

namespace fullshard::cuda {

StreamTimes assemble_stream_times(const std::vector<TimedWork>& work, double anchor_s,
                                  bool with_starts) {
  StreamTimes t;
  for (const TimedWork& w : work) {
    const double begin = anchor_s + static_cast<double>(w.begin_ms) / 1e3;
    const double end = std::max(begin, anchor_s + static_cast<double>(w.end_ms) / 1e3);
    t.add(w.stream, w.seq, w.group.empty() ? nullptr : &w.group, begin, end, with_starts);
  }
  return t;
}

bool parse_stream_times(const char* value) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "1" || v == "on") return true;
  if (v == "0" || v == "off") return false;
  throw InputError("FULLSHARD_CUDA_STREAM_TIMES", "is '" + v + "'",
                   "set it to 'off' (no timing events) or 'on', or unset it");
}

}  // namespace fullshard::cuda
