// NOTE [Float8 GEMM staging] in float8_staging.h.
#include "backends/cuda/float8_staging.h"

#include <stdexcept>
#include <string>

namespace fullshard::cuda {

namespace {
constexpr size_t kGrain = size_t{1} << 20;
}  // namespace

Float8Staging::~Float8Staging() {
  for (Block& b : blocks_)
    if (b.ptr) cudaFree(b.ptr);  // teardown: nothing to report to
}

void* Float8Staging::reserve(StreamRole role, cudaStream_t stream, size_t bytes) {
  Block& b = blocks_[static_cast<size_t>(role)];
  if (bytes <= b.bytes) return b.ptr;
  const size_t want = (bytes + kGrain - 1) / kGrain * kGrain;
  auto fail = [&](cudaError_t e, const char* call) {
    cudaGetLastError();
    throw std::runtime_error(std::string(call) + " of " + std::to_string(want) +
                             " bytes of float8 GEMM staging (NOTE [Float8 GEMM staging]) failed: " +
                             cudaGetErrorString(e));
  };
  if (b.ptr) {  // earlier GEMMs on this stream may still read it
    if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
      fail(e, "cudaStreamSynchronize");
    cudaFree(b.ptr);
    b = Block{};
  }
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, want); e != cudaSuccess) fail(e, "cudaMalloc");
  b = Block{p, want};
  return p;
}

size_t Float8Staging::held_bytes() const {
  size_t n = 0;
  for (const Block& b : blocks_) n += b.bytes;
  return n;
}

}  // namespace fullshard::cuda
