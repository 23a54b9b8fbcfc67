// GPU tests of device and pinned host memory: CudaSegmentSource (cudaMalloc and driver VMM),
// the shared CachingAllocator on real device memory, PinnedHostMemory's deferred frees.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "backends/cuda/device_memory.h"
#include "backends/cuda/driver_api.h"
#include "backends/cuda/pinned_host.h"
#include "backends/cuda/stream_set.h"
#include "backends/cuda/vmm_granularity.h"
#include "tests/gpu/gpu_test_main.h"

namespace fullshard::cuda {
namespace {

constexpr uint64_t MiB = 1 << 20;

int current_device() {
  int d = 0;
  cudaGetDevice(&d);
  return d;
}

// Writes `byte` over [p, p + n) on the device and reads it back.
bool device_holds(uintptr_t p, uint64_t n, int byte) {
  if (cudaMemset(reinterpret_cast<void*>(p), byte, n) != cudaSuccess) return false;
  std::vector<unsigned char> h(n);
  if (cudaMemcpy(h.data(), reinterpret_cast<void*>(p), n, cudaMemcpyDeviceToHost) != cudaSuccess)
    return false;
  for (unsigned char c : h)
    if (c != byte) return false;
  return true;
}

TEST(CudaSegmentSource, MapAndUnmapRealDeviceMemory) {
  CudaSegmentSource src(current_device());
  int unmaps = 0;
  src.before_unmap = [&] { ++unmaps; };
  size_t free0 = 0, total = 0;
  cudaMemGetInfo(&free0, &total);
  auto p = src.map(64 * MiB);
  ASSERT_TRUE(p.has_value());
  size_t free1 = 0;
  cudaMemGetInfo(&free1, &total);
  EXPECT_GE(free0 - free1, 64 * MiB);
  EXPECT_TRUE(device_holds(*p, 64 * MiB, 0x5a));
  src.unmap(*p, 64 * MiB);
  EXPECT_EQ(unmaps, 1);
  // More than the device has: nullopt (the allocator's OOM), not an exception.
  EXPECT_FALSE(src.map(total * 2).has_value());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaSegmentSource, ExpandableCommitDecommitInPlace) {
  CudaSegmentSource src(current_device());
  const uint64_t g = src.granularity();
  ASSERT_GT(g, 0u);
  EXPECT_EQ(kExpandablePageUnit % g, 0u);
  auto base = src.reserve(200 * MiB);
  ASSERT_TRUE(base.has_value());
  EXPECT_EQ(*base % g, 0u);
  // Two 20 MiB pages at offsets 0 and 40 MiB: each readable and writable in place.
  ASSERT_TRUE(src.commit(*base, 20 * MiB));
  ASSERT_TRUE(src.commit(*base + 40 * MiB, 20 * MiB));
  EXPECT_EQ(src.committed_bytes(), 40 * MiB);
  EXPECT_TRUE(device_holds(*base, 20 * MiB, 1));
  EXPECT_TRUE(device_holds(*base + 40 * MiB, 20 * MiB, 2));
  src.decommit(*base, 20 * MiB);
  EXPECT_EQ(src.committed_bytes(), 20 * MiB);
  // Re-commit at the same place: the address range is reused, the memory is fresh.
  ASSERT_TRUE(src.commit(*base, 20 * MiB));
  EXPECT_TRUE(device_holds(*base, 20 * MiB, 3));
  src.release(*base, 200 * MiB);  // decommits what is left
  EXPECT_EQ(src.committed_bytes(), 0u);
}

TEST(CudaSegmentSource, AllocatorPeakReservedIsRealDeviceMemory) {
  for (bool expandable : {false, true}) {
    CudaSegmentSource src(current_device());
    AllocatorOptions o;
    o.expandable_segments = expandable;
    o.capacity_bytes = 8ull << 30;
    CachingAllocator alloc(o, &src);
    auto a = alloc.malloc(30 * MiB, 0);
    auto b = alloc.malloc(3 * MiB, 0);
    auto c = alloc.malloc(100, 1);
    ASSERT_TRUE(a && b && c);
    EXPECT_TRUE(device_holds(a->address, 30 * MiB, 7)) << "expandable=" << expandable;
    EXPECT_TRUE(device_holds(b->address, 3 * MiB, 8));
    EXPECT_TRUE(device_holds(c->address, 512, 9));
    if (expandable) {
      EXPECT_EQ(src.committed_bytes(), alloc.stats().reserved_bytes);
    }
    alloc.free(*a);
    alloc.empty_cache();
    if (expandable) {
      EXPECT_EQ(src.committed_bytes(), alloc.stats().reserved_bytes);
    }
    alloc.free(*b);
    alloc.free(*c);
  }
}

TEST(PinnedHostMemory, FreeWaitsForEveryStream) {
  const DriverApi* api = driver_api();
  ASSERT_NE(api, nullptr);
  StreamSet streams;
  EventPool events;
  PinnedHostMemory pinned(events, streams.all());
  void* p = pinned.allocate(4 * MiB);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(pinned.live_bytes(), 4 * MiB);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  // A D2H copy into it on the offload stream, held behind a host word the test opens later.
  void* gate = nullptr;
  ASSERT_EQ(cudaHostAlloc(&gate, 4, cudaHostAllocMapped), cudaSuccess);
  *static_cast<volatile uint32_t*>(gate) = 0;
  void* gate_dev = nullptr;
  cudaHostGetDevicePointer(&gate_dev, gate, 0);
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 4 * MiB), cudaSuccess);
  cudaStream_t d2h = streams.get(StreamRole::kDeviceToHost);
  ASSERT_EQ(api->cuStreamWaitValue32(d2h, reinterpret_cast<CUdeviceptr>(gate_dev), 1,
                                     CU_STREAM_WAIT_VALUE_GEQ),
            CUDA_SUCCESS);
  cudaMemcpyAsync(p, dev, 4 * MiB, cudaMemcpyDeviceToHost, d2h);
  pinned.free(p);  // the host frees while the copy is still queued
  EXPECT_EQ(pinned.live_bytes(), 0u);
  pinned.reclaim(false);
  EXPECT_EQ(pinned.deferred_count(), 1u);  // not given back: the offload stream did not pass
  EXPECT_EQ(pinned.deferred_bytes(), 4 * MiB);
  void* q = pinned.allocate(1024);  // allocate() reclaims too, and still must not free p
  EXPECT_EQ(pinned.deferred_count(), 1u);
  *static_cast<volatile uint32_t*>(gate) = 1;
  pinned.reclaim(true);
  EXPECT_EQ(pinned.deferred_count(), 0u);
  EXPECT_EQ(pinned.deferred_bytes(), 0u);
  EXPECT_EQ(pinned.cached_bytes(), 4 * MiB);  // NOTE [Pinned host cache]: kept for reuse
  EXPECT_EQ(cudaStreamQuery(d2h), cudaSuccess);
  EXPECT_EQ(pinned.allocate(3 * MiB), p);  // same rounded size (4 MiB): the cached buffer
  EXPECT_EQ(pinned.cached_bytes(), 0u);
  pinned.free(p);
  pinned.free(q);
  cudaFree(dev);
  cudaFreeHost(gate);
}

}  // namespace
}  // namespace fullshard::cuda
