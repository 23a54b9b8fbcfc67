# kInitParam on the device (backends/cuda/kernels/init_param.cu) against the host generator
# (core/data/param_init.cc), bit for bit over every layout and dtype (label gpu, exit 77
# without a GPU).
add_executable(cuda_init_param_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_init_param_test.cc)
target_link_libraries(cuda_init_param_test PRIVATE fullshard_cuda rapidcheck_gtest rapidcheck GTest::gtest)
target_include_directories(cuda_init_param_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_init_param.gpu COMMAND cuda_init_param_test)
set_tests_properties(cuda_init_param.gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu
                     ENVIRONMENT "RC_PARAMS=seed=20261121 max_success=200")
