# Tests of CudaBackend (backends/cuda/cuda_backend.h). Included by tests/gpu/CMakeLists.txt where
# fullshard_cuda builds.
#
# cuda_backend_host_test: no GPU needed (it hides any GPU itself): construction without a GPU is
# an InputError naming the fix. Runs everywhere, never skips.
add_executable(cuda_backend_host_test ${CMAKE_CURRENT_LIST_DIR}/cuda_backend_host_test.cc)
target_link_libraries(cuda_backend_host_test PRIVATE fullshard_cuda GTest::gtest)
add_test(NAME gpu.cuda_backend_host COMMAND cuda_backend_host_test)

# cuda_backend_gpu_test: real training on the GPU through runner::run_rank: predicted == measured
# memory to the byte (classic and expandable segments, 1 rank over NCCL, 2 ranks sharing one GPU
# over staged Gloo) and losses equal to the CPU backend's within bf16 tolerance. Label "gpu",
# exit 77 (skipped) without a GPU; one ctest test (no gtest discovery: it would run the binary).
add_executable(cuda_backend_gpu_test ${CMAKE_CURRENT_LIST_DIR}/cuda_backend_gpu_test.cc)
target_link_libraries(cuda_backend_gpu_test PRIVATE fullshard_cuda fullshard_runner fullshard_sim fullshard_cpu
                      GTest::gtest)
target_compile_definitions(cuda_backend_gpu_test PRIVATE FULLSHARD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_test(NAME gpu.cuda_backend_gpu_test COMMAND cuda_backend_gpu_test)
set_tests_properties(gpu.cuda_backend_gpu_test PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900)

# cuda_pipeline_transfer_test: no GPU needed. Pipeline transfers on the CUDA backend as the host
# decides them (backends/cuda/pipeline_transfer.h): the end of a channel a rank is, and that the
# ranks' channel communicators, created in the agreed order, never wait on each other.
add_executable(cuda_pipeline_transfer_test ${CMAKE_CURRENT_LIST_DIR}/cuda_pipeline_transfer_test.cc)
target_link_libraries(cuda_pipeline_transfer_test PRIVATE fullshard_cuda fullshard_train GTest::gtest
                      GTest::gtest_main)
target_compile_definitions(cuda_pipeline_transfer_test PRIVATE FULLSHARD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_test(NAME gpu.cuda_pipeline_transfer COMMAND cuda_pipeline_transfer_test)
