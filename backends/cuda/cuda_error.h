#pragma once
// Turning CUDA runtime, driver and NCCL status codes into fullshard errors. A failing call that
// is a fullshard bug or a broken device throws InternalError naming the call and CUDA's own
// words; calls that may fail for a reason the caller handles (out of memory) are checked by
// the caller instead.
#include <string>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

namespace fullshard::cuda {

// "cudaErrorMemoryAllocation: out of memory".
std::string cuda_error_text(cudaError_t e);
std::string driver_error_text(CUresult r);
std::string nccl_error_text(ncclResult_t r);

// Throw InternalError "<what> failed: <text>" unless the call succeeded.
void check_cuda(cudaError_t e, const char* what);
void check_driver(CUresult r, const char* what);

}  // namespace fullshard::cuda

#define FULLSHARD_CUDA(call) ::fullshard::cuda::check_cuda((call), #call)
