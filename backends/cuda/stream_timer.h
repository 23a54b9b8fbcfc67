#pragma once
// Timing events around each kernel and collective of one rank (NOTE [Measured stream times on
// the GPU], stream_times.h). Used from the host program's thread only.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "backends/cuda/stream_times.h"

namespace fullshard::cuda {

class StreamTimer {
 public:
  StreamTimer() = default;
  ~StreamTimer();
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;

  // Records the anchor on `s` and waits for it; now() read as the wait returns is the anchor's
  // time on the host clock (the anchor completes as the stream reaches it, and the wait returns
  // then). The readings so far must have been taken.
  void anchor(cudaStream_t s, const std::function<double()>& now);
  // Before and after one kernel or collective enqueued on `s` (group: its process group's
  // name, null for a kernel). A begin whose end never came (the enqueue threw) is dropped.
  void begin(StreamRole r, cudaStream_t s, uint64_t seq, const std::string* group);
  void end(cudaStream_t s);
  // Waits for every recorded end and reads the pairs back (ms after the anchor, whose host
  // time goes to *anchor_s); their events are recycled. Nothing before the first anchor().
  std::vector<TimedWork> take(double* anchor_s);

 private:
  struct Pending {
    TimedWork work;
    cudaEvent_t begin = nullptr, end = nullptr;
  };
  cudaEvent_t acquire();
  void recycle(Pending& p);

  cudaEvent_t anchor_ = nullptr;
  double anchor_s_ = 0;
  std::optional<Pending> open_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_;
};

}  // namespace fullshard::cuda
