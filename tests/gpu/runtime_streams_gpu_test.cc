// GPU tests of streams and events: one stream per role at FSDP2's priorities, events order
// streams, a host wait ends when the event's work is done.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "backends/cuda/driver_api.h"
#include "backends/cuda/stream_priority.h"
#include "backends/cuda/stream_set.h"
#include "tests/gpu/gpu_test_main.h"

namespace fullshard::cuda {
namespace {

TEST(StreamSet, OneStreamPerRoleAtItsPriority) {
  StreamSet s;
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  for (StreamRole r : kAllStreams) {
    for (StreamRole q : kAllStreams) {
      if (q != r) {
        EXPECT_NE(s.get(r), s.get(q));
      }
    }
    int p = 0;
    ASSERT_EQ(cudaStreamGetPriority(s.get(r), &p), cudaSuccess);
    EXPECT_EQ(p, stream_priority(r, least, greatest)) << stream_name(r);
  }
  if (greatest < least) {
    int ag = 0, compute = 0;
    cudaStreamGetPriority(s.get(StreamRole::kAllGather), &ag);
    cudaStreamGetPriority(s.get(StreamRole::kDefault), &compute);
    EXPECT_LT(ag, compute);  // numerically lower = scheduled first
  }
}

TEST(EventPool, RecyclesTimingFreeEvents) {
  EventPool pool;
  cudaEvent_t a = pool.acquire();
  float ms = 0;
  cudaEventRecord(a, nullptr);
  cudaEventSynchronize(a);
  EXPECT_EQ(cudaEventElapsedTime(&ms, a, a), cudaErrorInvalidResourceHandle);  // timing disabled
  cudaGetLastError();
  pool.release(a);
  EXPECT_EQ(pool.acquire(), a);
  EXPECT_EQ(pool.created(), 1u);
}

// A stream held by cuStreamWaitValue32 on a host word: work behind it is not done until the
// host releases the word. Ordering through an event then shows on the other stream.
TEST(StreamSet, EventOrdersStreamsAndSynchronizeWaits) {
  const DriverApi* api = driver_api();
  ASSERT_NE(api, nullptr);
  StreamSet s;
  EventPool pool;
  void* flag_host = nullptr;
  ASSERT_EQ(cudaHostAlloc(&flag_host, 4, cudaHostAllocMapped), cudaSuccess);
  auto* flag = static_cast<volatile uint32_t*>(flag_host);
  *flag = 0;
  void* flag_dev = nullptr;
  cudaHostGetDevicePointer(&flag_dev, flag_host, 0);
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 1024), cudaSuccess);
  cudaMemset(buf, 0, 1024);
  // Pinned: a device-to-pageable cudaMemcpyAsync returns only once the copy completed, which
  // here waits on the gate this thread opens later (a hang).
  void* host_mem = nullptr;
  ASSERT_EQ(cudaHostAlloc(&host_mem, sizeof(int), cudaHostAllocDefault), cudaSuccess);
  int& host = *static_cast<int*>(host_mem);
  host = -1;

  cudaStream_t producer = s.get(StreamRole::kAllGather), consumer = s.get(StreamRole::kDefault);
  ASSERT_EQ(api->cuStreamWaitValue32(producer, reinterpret_cast<CUdeviceptr>(flag_dev), 1,
                                     CU_STREAM_WAIT_VALUE_GEQ),
            CUDA_SUCCESS);
  cudaMemsetAsync(buf, 0x11, 1024, producer);
  cudaEvent_t produced = pool.acquire();
  cudaEventRecord(produced, producer);
  cudaStreamWaitEvent(consumer, produced, 0);
  cudaMemcpyAsync(&host, buf, sizeof host, cudaMemcpyDeviceToHost, consumer);
  cudaEvent_t consumed = pool.acquire();
  cudaEventRecord(consumed, consumer);

  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(cudaEventQuery(consumed), cudaErrorNotReady);  // held behind the producer
  // NOTE [Not ready is not an error] (backends/cuda/cuda_error.h): whether the runtime keeps
  // NotReady as the last error.
  const cudaError_t kept = cudaPeekAtLastError();
  std::printf("cudaEventQuery's NotReady %s the thread's last error (%s)\n",
              kept == cudaErrorNotReady ? "is kept as" : "is not", cudaGetErrorName(kept));
  cudaGetLastError();
  EXPECT_EQ(cudaEventQuery(produced), cudaErrorNotReady);
  cudaGetLastError();
  std::atomic<bool> released{false};
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    released = true;
    *flag = 1;
  });
  ASSERT_EQ(cudaEventSynchronize(consumed), cudaSuccess);  // what CudaBackend::synchronize does
  EXPECT_TRUE(released.load());
  EXPECT_EQ(host, 0x11111111);
  opener.join();
  cudaFree(buf);
  cudaFreeHost(host_mem);
  cudaFreeHost(flag_host);
}

}  // namespace
}  // namespace fullshard::cuda
