# Tests of the CUDA backend's runtime (backends/cuda, all but kernels). Included by
# tests/gpu/CMakeLists.txt where fullshard_cuda builds.
#
# runtime_host_test: host-only logic (watchdog state machine on a fake clock, CollectiveCall ->
# NCCL argument mapping, unique-id store keys, stream priorities, granule arithmetic, transport
# choice). No GPU needed: it runs everywhere, never skips.
add_executable(runtime_host_test ${CMAKE_CURRENT_LIST_DIR}/runtime_host_test.cc)
target_link_libraries(runtime_host_test PRIVATE fullshard_cuda fullshard_report GTest::gtest GTest::gtest_main)
add_test(NAME gpu.runtime_host COMMAND runtime_host_test)

# GPU tests: one ctest test per executable (no gtest discovery: discovery would run the binary
# at build time), label "gpu", exit 77 (skipped) where no GPU is visible (gpu_test_main.h).
foreach(name runtime_memory_gpu_test runtime_streams_gpu_test nccl_collectives_gpu_test
             nccl_staged_gloo_gpu_test)
  add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/${name}.cc)
  target_link_libraries(${name} PRIVATE fullshard_cuda GTest::gtest)
  add_test(NAME gpu.${name} COMMAND ${name})
  set_tests_properties(gpu.${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300)
endforeach()
