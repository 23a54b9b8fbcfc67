#include "backends/cuda/cuda_error.h"

#include "backends/cuda/driver_api.h"
#include "core/common/error.h"

namespace fullshard::cuda {

std::string cuda_error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

std::string driver_error_text(CUresult r) {
  const DriverApi* api = driver_api();
  const char* name = nullptr;
  const char* text = nullptr;
  if (api != nullptr) {
    api->cuGetErrorName(r, &name);
    api->cuGetErrorString(r, &text);
  }
  return std::string(name != nullptr ? name : "CUresult " + std::to_string(static_cast<int>(r))) +
         (text != nullptr ? std::string(": ") + text : std::string());
}

std::string nccl_error_text(ncclResult_t r) {
  // ncclGetErrorString needs no device and no communicator.
  return std::string(ncclGetErrorString(r)) + " (ncclResult " +
         std::to_string(static_cast<int>(r)) + ")";
}

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky-free error so that the next call does not see it
  throw InternalError(std::string(what) + " failed: " + cuda_error_text(e));
}

void check_driver(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  throw InternalError(std::string(what) + " failed: " + driver_error_text(r));
}

}  // namespace fullshard::cuda
