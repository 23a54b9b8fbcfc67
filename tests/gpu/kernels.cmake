# CUDA kernels (backends/cuda/kernels, docs/cuda-kernels.md).
# cuda_kernels_plan_test: host-side planning, runs everywhere (no GPU needed, never skips).
# cuda_kernels_test, cuda_kernels_eager_test (the eager decompositions), cuda_kernels_tp_test,
# cuda_kernels_compiled_test (the compiled block's fused regions): every kernel against the CPU
# reference on the GPU (harness: kernel_compare.h); exit 77 (skipped) where no GPU is visible.
# None uses gtest_discover_tests: discovery would run the GPU binaries at build time.
add_executable(cuda_kernels_plan_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_kernels_plan_test.cc)
target_link_libraries(cuda_kernels_plan_test PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels rapidcheck_gtest
                      rapidcheck GTest::gtest GTest::gtest_main)
target_include_directories(cuda_kernels_plan_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.plan COMMAND cuda_kernels_plan_test)
# scaled_gemm_plan_test: the cuBLASLt float8 GEMM's layouts against the CPU emulation (no GPU).
add_executable(scaled_gemm_plan_test ${CMAKE_CURRENT_SOURCE_DIR}/scaled_gemm_plan_test.cc)
target_link_libraries(scaled_gemm_plan_test PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels
                      GTest::gtest GTest::gtest_main)
target_include_directories(scaled_gemm_plan_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.scaled_gemm_plan COMMAND scaled_gemm_plan_test)
# scaled_gemm_gpu_test: the float8 GEMM itself on sm_89 or later (label gpu, exit 77 otherwise).
add_executable(scaled_gemm_gpu_test ${CMAKE_CURRENT_SOURCE_DIR}/scaled_gemm_gpu_test.cc)
target_link_libraries(scaled_gemm_gpu_test PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels
                      GTest::gtest)
target_include_directories(scaled_gemm_gpu_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.scaled_gemm_gpu COMMAND scaled_gemm_gpu_test)
set_tests_properties(cuda_kernels.scaled_gemm_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
# cuda_kernels_rowplan_test: launch planning of the row / multi-tensor kernels (no GPU needed).
add_executable(cuda_kernels_rowplan_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_kernels_rowplan_test.cc)
target_link_libraries(cuda_kernels_rowplan_test PRIVATE fullshard_cuda_kernels rapidcheck_gtest rapidcheck GTest::gtest
                      GTest::gtest_main)
target_include_directories(cuda_kernels_rowplan_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.rowplan COMMAND cuda_kernels_rowplan_test)
set_tests_properties(cuda_kernels.rowplan PROPERTIES ENVIRONMENT "RC_PARAMS=seed=20261121")
# The attention kernels' speed against cuDNN (tools/bench/attention_bench.cc), labelled gpu so that
# tools/gpu-check.sh packs and runs it (its table lands in test-cuda_kernels.attention_bench.log);
# it fails only when a kernel errors or FlashAttention-2's outputs leave the WMMA kernels'.
if(TARGET bench_attention)
  add_test(NAME cuda_kernels.attention_bench COMMAND bench_attention --iters 10)
  set_tests_properties(cuda_kernels.attention_bench PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 300)
endif()
# FlashAttention-2's launch plan and fragment maps (host only).
add_executable(attention_fa2_plan_test ${CMAKE_CURRENT_SOURCE_DIR}/attention_fa2_plan_test.cc)
target_link_libraries(attention_fa2_plan_test PRIVATE fullshard_cuda_kernels GTest::gtest GTest::gtest_main)
target_include_directories(attention_fa2_plan_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.fa2_plan COMMAND attention_fa2_plan_test)

foreach(t cuda_kernels_test cuda_kernels_eager_test cuda_kernels_rows_test)
  add_executable(${t} ${CMAKE_CURRENT_SOURCE_DIR}/${t}.cc)
  target_link_libraries(${t} PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels rapidcheck_gtest rapidcheck GTest::gtest)
  target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR})
endforeach()
add_test(NAME cuda_kernels.gpu COMMAND cuda_kernels_test)
add_test(NAME cuda_kernels.eager_gpu COMMAND cuda_kernels_eager_test)
add_test(NAME cuda_kernels.rows_gpu COMMAND cuda_kernels_rows_test)
set_tests_properties(cuda_kernels.gpu cuda_kernels.eager_gpu cuda_kernels.rows_gpu PROPERTIES SKIP_RETURN_CODE 77
                     LABELS gpu)

# Tensor parallelism's kernels (backends/cuda/kernels/tensor_parallel.h): the host-side plan
# (runs everywhere) and the kernels against the CPU reference (label gpu, exit 77 without a GPU).
add_executable(cuda_kernels_tp_plan_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_kernels_tp_plan_test.cc)
target_link_libraries(cuda_kernels_tp_plan_test PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels rapidcheck_gtest
                      rapidcheck GTest::gtest GTest::gtest_main)
target_include_directories(cuda_kernels_tp_plan_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.tp_plan COMMAND cuda_kernels_tp_plan_test)

add_executable(cuda_kernels_tp_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_kernels_tp_test.cc)
target_link_libraries(cuda_kernels_tp_test PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels rapidcheck_gtest rapidcheck
                      GTest::gtest)
target_include_directories(cuda_kernels_tp_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.tp_gpu COMMAND cuda_kernels_tp_test)
set_tests_properties(cuda_kernels.tp_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)

# The compiled block's kernels (compiled.cu) against the CPU reference (label gpu).
add_executable(cuda_kernels_compiled_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_kernels_compiled_test.cc)
target_link_libraries(cuda_kernels_compiled_test PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels rapidcheck_gtest
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

# cuda_row_kernels_bench (tools/bench): the memory-bound kernels timed at the 1B benchmark's
# shapes, achieved GB/s against the GPU's peak. Not a test; built with the GPU tests.
add_executable(cuda_row_kernels_bench ${PROJECT_SOURCE_DIR}/tools/bench/cuda_row_kernels_bench.cc)
target_link_libraries(cuda_row_kernels_bench PRIVATE fullshard_cuda_kernels)
target_include_directories(cuda_row_kernels_bench PRIVATE ${PROJECT_SOURCE_DIR})

# cuda_op_contract_test: host-only; every op the tiny models emit (recorded through the
# simulator's backend, recorded_ops.h) passes both the CPU reference kernel and the CUDA
# dispatcher's operand checks (any GPU hidden: launches fail after the checks).
add_executable(cuda_op_contract_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_op_contract_test.cc)
target_link_libraries(cuda_op_contract_test PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels fullshard_sim
                      GTest::gtest)
target_include_directories(cuda_op_contract_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.op_contracts COMMAND cuda_op_contract_test)

# cuda_gemm_shapes_test: every GEMM layout the tiny Llama / GPT-2 and the 1B benchmark's steps
# launch (from their recorded op lists) against an fp64 reference (label gpu, exit 77 without one).
add_executable(cuda_gemm_shapes_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_gemm_shapes_test.cc)
target_link_libraries(cuda_gemm_shapes_test PRIVATE fullshard_cuda_kernels fullshard_sim GTest::gtest)
target_include_directories(cuda_gemm_shapes_test PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(cuda_gemm_shapes_test PRIVATE FULLSHARD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_test(NAME cuda_kernels.gemm_shapes_gpu COMMAND cuda_gemm_shapes_test)
set_tests_properties(cuda_kernels.gemm_shapes_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)

# cuDNN attention at the 1B benchmark's shape on the GPU (label gpu, exit 77 without one): both
# directions run cuDNN within the model's workspace (NOTE [cuDNN plan choice]).
add_executable(cudnn_sdpa_gpu_test ${CMAKE_CURRENT_SOURCE_DIR}/cudnn_sdpa_gpu_test.cc)
target_link_libraries(cudnn_sdpa_gpu_test PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels rapidcheck_gtest rapidcheck
                      GTest::gtest)
target_include_directories(cudnn_sdpa_gpu_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.cudnn_sdpa_gpu COMMAND cudnn_sdpa_gpu_test)
set_tests_properties(cuda_kernels.cudnn_sdpa_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)

# torchao's float8 kinds on the CUDA backend (float8.cu, float8_dispatch.cc; docs/float8.md):
# cuda_float8_plan_test on the host (no GPU needed), cuda_float8_gpu_test every kind against the
# CPU kernels to the bit on a GPU (label gpu, exit 77 without one; the GEMMs need sm_89+).
add_executable(cuda_float8_plan_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_float8_plan_test.cc)
target_link_libraries(cuda_float8_plan_test PRIVATE fullshard_cuda_kernels rapidcheck_gtest rapidcheck
                      GTest::gtest GTest::gtest_main)
target_include_directories(cuda_float8_plan_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.float8_plan COMMAND cuda_float8_plan_test)
set_tests_properties(cuda_kernels.float8_plan PROPERTIES ENVIRONMENT "RC_PARAMS=seed=20261121")
add_executable(cuda_float8_gpu_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_float8_gpu_test.cc)
target_link_libraries(cuda_float8_gpu_test PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels rapidcheck_gtest
                      rapidcheck GTest::gtest)
target_include_directories(cuda_float8_gpu_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.float8_gpu COMMAND cuda_float8_gpu_test)
set_tests_properties(cuda_kernels.float8_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)

# The mixture-of-experts kinds on the CUDA backend (moe_*.cu, moe_dispatch.cc; docs/moe.md):
# cuda_moe_plan_test on the host (index maps against the CPU kernels, plans; no GPU needed),
# cuda_moe_gpu_test every kind against the CPU kernels on a GPU (label gpu, exit 77 without one).
add_executable(cuda_moe_plan_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_moe_plan_test.cc)
target_link_libraries(cuda_moe_plan_test PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels rapidcheck_gtest
                      rapidcheck GTest::gtest GTest::gtest_main)
target_include_directories(cuda_moe_plan_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.moe_plan COMMAND cuda_moe_plan_test)
set_tests_properties(cuda_kernels.moe_plan PROPERTIES ENVIRONMENT "RC_PARAMS=seed=20261121")
add_executable(cuda_moe_gpu_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_moe_gpu_test.cc)
target_link_libraries(cuda_moe_gpu_test PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels rapidcheck_gtest
                      rapidcheck GTest::gtest)
target_include_directories(cuda_moe_gpu_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.moe_gpu COMMAND cuda_moe_gpu_test)
set_tests_properties(cuda_kernels.moe_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)

# Context parallelism on the CUDA backend (context_parallel.cu, context_parallel_dispatch.cc;
# docs/context-parallel.md): cuda_context_parallel_plan_test on the host (the ring rounds' plans
# walked against the CPU kernels, the merge and row-add plans; no GPU needed);
# cuda_context_parallel_gpu_test those kinds and the split RMSNorm backward against the CPU
# kernels on a GPU (label gpu, exit 77 without one).
add_executable(cuda_context_parallel_plan_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_context_parallel_plan_test.cc)
target_link_libraries(cuda_context_parallel_plan_test PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels
                      GTest::gtest GTest::gtest_main)
target_include_directories(cuda_context_parallel_plan_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.context_parallel_plan COMMAND cuda_context_parallel_plan_test)
add_executable(cuda_context_parallel_gpu_test ${CMAKE_CURRENT_SOURCE_DIR}/cuda_context_parallel_gpu_test.cc)
target_link_libraries(cuda_context_parallel_gpu_test PRIVATE fullshard_cuda_kernels fullshard_cpu_kernels
                      GTest::gtest)
target_include_directories(cuda_context_parallel_gpu_test PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME cuda_kernels.context_parallel_gpu COMMAND cuda_context_parallel_gpu_test)
set_tests_properties(cuda_kernels.context_parallel_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
