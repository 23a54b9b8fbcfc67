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

// NOTE [Not ready is not an error]: cudaEventQuery / cudaStreamQuery answer cudaErrorNotReady for
// work still running, and the runtime may keep it as the thread's last error. fullshard checks
// every kernel launch with cudaGetLastError (launch::check_launch), which would then report a
// query's "not ready" as the next launch's failure. So every NotReady answer is followed by a
// cudaGetLastError() that drops it, as PyTorch does (c10/cuda CUDAEvent::query: "ignore and clear
// the error if not ready").

// Throw InternalError "<what> failed: <text>" unless the call succeeded.
void check_cuda(cudaError_t e, const char* what);
void check_driver(CUresult r, const char* what);

}  // namespace fullshard::cuda

#define FULLSHARD_CUDA(call) ::fullshard::cuda::check_cuda((call), #call)
