# CUDA kernels (backends/cuda/kernels, docs/cuda-kernels.md).
# cuda_kernels_plan_test: host-side planning, runs everywhere (no GPU needed, never skips).
# cuda_kernels_test, cuda_kernels_eager_test (the eager decompositions), cuda_kernels_tp_test,
# cuda_kernels_compiled_test (the compiled block's fused regions): every kernel against the CPU
# reference on the GPU (harness: kernel_compare.h); exit 77 (skipped) where no GPU is visible.
# None uses gtest_discover_tests: discovery would run the GPU binaries at build time.
add_executable(cuda_kernels_plan_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_kernels_plan_test.cc)
target_link_libraries(cuda_kernels_plan_test PRIVATE fullshard_cuda_kernels fullshard_kernels rapidcheck_gtest
                      rapidcheck GTest::gtest GTest::gtest_main)
target_include_directories(cuda_kernels_plan_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.plan COMMAND cuda_kernels_plan_test)

foreach(t cuda_kernels_test cuda_kernels_eager_test)
  add_executable(${t} ${CMAKE_CURRENT_SOURCE_DIR}/${t}.cc)
  target_link_libraries(${t} PRIVATE fullshard_cuda_kernels fullshard_kernels rapidcheck_gtest rapidcheck GTest::gtest)
  target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR})
endforeach()
add_test(NAME cuda_kernels.gpu COMMAND cuda_kernels_test)
add_test(NAME cuda_kernels.eager_gpu COMMAND cuda_kernels_eager_test)
set_tests_properties(cuda_kernels.gpu cuda_kernels.eager_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)

# Tensor parallelism's kernels (backends/cuda/kernels/tensor_parallel.h): the host-side plan
# (runs everywhere) and the kernels against the CPU reference (label gpu, exit 77 without a GPU).
add_executable(cuda_kernels_tp_plan_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_kernels_tp_plan_test.cc)
target_link_libraries(cuda_kernels_tp_plan_test PRIVATE fullshard_cuda_kernels fullshard_kernels rapidcheck_gtest
                      rapidcheck GTest::gtest GTest::gtest_main)
target_include_directories(cuda_kernels_tp_plan_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.tp_plan COMMAND cuda_kernels_tp_plan_test)

add_executable(cuda_kernels_tp_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_kernels_tp_test.cc)
target_link_libraries(cuda_kernels_tp_test PRIVATE fullshard_cuda_kernels fullshard_kernels rapidcheck_gtest rapidcheck
                      GTest::gtest)
target_include_directories(cuda_kernels_tp_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.tp_gpu COMMAND cuda_kernels_tp_test)
set_tests_properties(cuda_kernels.tp_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)

# The compiled block's kernels (compiled.cu) against the CPU reference (label gpu).
add_executable(cuda_kernels_compiled_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_kernels_compiled_test.cc)
target_link_libraries(cuda_kernels_compiled_test PRIVATE fullshard_cuda_kernels fullshard_kernels rapidcheck_gtest
                      rapidcheck GTest::gtest)
target_include_directories(cuda_kernels_compiled_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.compiled_gpu COMMAND cuda_kernels_compiled_test)
set_tests_properties(cuda_kernels.compiled_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)

# cuda_kernel_coverage_test: host-only; the op kinds the simulator records for every variant a
# user can train on the CUDA backend all have kernels.
add_executable(cuda_kernel_coverage_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_kernel_coverage_test.cc)
target_link_libraries(cuda_kernel_coverage_test PRIVATE fullshard_cuda_kernels fullshard_sim GTest::gtest
                      GTest::gtest_main)
target_include_directories(cuda_kernel_coverage_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.coverage COMMAND cuda_kernel_coverage_test)

# cuDNN attention's host side (cudnn_sdpa.h): layouts, prechecks, the env switch and the
# frontend's validation of the graphs; runs everywhere, no GPU needed.
add_executable(cudnn_sdpa_host_test ${CMAKE_CURRENT_SOURCE_DIR}/cudnn_sdpa_host_test.cc)
target_link_libraries(cudnn_sdpa_host_test PRIVATE fullshard_cuda_kernels rapidcheck_gtest rapidcheck GTest::gtest
                      GTest::gtest_main)
target_include_directories(cudnn_sdpa_host_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.cudnn_sdpa_host COMMAND cudnn_sdpa_host_test)

# cuDNN attention at the 1B benchmark's shape on the GPU (label gpu, exit 77 without one): both
# directions run cuDNN within the model's workspace (NOTE [cuDNN plan choice]).
add_executable(cudnn_sdpa_gpu_test ${CMAKE_CURRENT_SOURCE_DIR}/cudnn_sdpa_gpu_test.cc)
target_link_libraries(cudnn_sdpa_gpu_test PRIVATE fullshard_cuda_kernels fullshard_kernels rapidcheck_gtest rapidcheck
                      GTest::gtest)
target_include_directories(cudnn_sdpa_gpu_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.cudnn_sdpa_gpu COMMAND cudnn_sdpa_gpu_test)
set_tests_properties(cuda_kernels.cudnn_sdpa_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
