#pragma once
// NOTE [NVTX ranges per op]: every op the CUDA backend launches is inside an NVTX range named
// as the op (OpCall::name: "layers.3.attention backward"), pushed and popped on the host thread
// around its enqueue, so Nsight Systems (nsys profile --trace=cuda,nvtx) shows each kernel under
// the op that launched it, on whatever stream it ran. nvtx3 is header-only (the CUDA toolkit's
// nvtx3/nvToolsExt.h): with no profiler attached a push or pop is a call through a function
// pointer that returns at once, so the ranges stay on in every run.
#include <string>

#include <nvtx3/nvToolsExt.h>

namespace fullshard::cuda {

class NvtxRange {
 public:
  explicit NvtxRange(const std::string& name) { nvtxRangePushA(name.c_str()); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace fullshard::cuda
