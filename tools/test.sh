#!/usr/bin/env bash
# Builds fullshard with its tests (into build-test/) and runs the whole ctest suite; then
# (NOTE [Sanitizer builds], CMakeLists.txt) the whole suite again under ASan+UBSan (build-asan/)
# and the Gloo/CPU multi-thread tests under TSan (build-tsan/). Any sanitizer finding fails.
# Property tests use a fixed rapidcheck seed (set in tests/CMakeLists.txt) so CI is repeatable.
#   FULLSHARD_TEST_BUILD=DIR        the normal build's directory (default build-test)
#   FULLSHARD_TEST_SANITIZERS=0     skip the ASan+UBSan and TSan runs
#   FULLSHARD_TEST_TSAN=0           skip the TSan step only
# Extra arguments go to every ctest run (e.g. -R PATTERN).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source tools/deps.sh
fullshard_install_deps
jobs="$(nproc)"
build="${FULLSHARD_TEST_BUILD:-build-test}"
# A build step that fails is run once more (-j 1) after printing the machine's state: CI once
# lost two compiles at once with no compiler output (an outside kill leaves nothing else to
# read). A real compile error fails again on the retry, with its message.
build_step() {
  local dir="$1"; shift
  cmake --build "$dir" -j "$jobs" "$@" && return 0
  echo "== the build failed; the machine's state, then one retry with -j 1" >&2
  df -h "$root" "${TMPDIR:-/tmp}" >&2 || true
  free -m >&2 || true
  ps -eo pid,rss,etime,args --sort=-rss 2> /dev/null | head -8 >&2 || true
  dmesg 2> /dev/null | tail -n 20 >&2 || true
  cmake --build "$dir" -j 1 "$@"
}
launcher=()
if command -v ccache > /dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" > /dev/null
build_step "$build"
ctest --test-dir "$build" --output-on-failure -j "$jobs" "$@"
[ "${FULLSHARD_TEST_SANITIZERS:-1}" = 1 ] || exit 0

# Sanitizer builds: -O1 (compiles about twice as fast as -O2 and keeps stacks readable), no
# CUDA backend (nothing CUDA runs here), no benchmarks.
san_flags=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"
           -DFULLSHARD_WITH_CUDA=OFF -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON "${launcher[@]}")
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# 40 cases per property (the normal run above draws 100): every property still runs its
# generators and code paths under the sanitizers, at less than half the time (CI's limit).
echo "== ASan+UBSan: the whole suite (build-asan)"
cmake -S . -B build-asan "${san_flags[@]}" -DFULLSHARD_SANITIZE=ON -DFULLSHARD_RC_MAX_SUCCESS=40 > /dev/null
build_step build-asan
ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900 "$@"

[ "${FULLSHARD_TEST_TSAN:-1}" = 1 ] || exit 0
# TSan: the tests whose code runs several threads (the CPU backend's streams, Gloo's
# collectives and fault handling, real training with thread-ranks; 20 cases per property).
# tests/tsan.supp (empty) says why nothing is suppressed.
echo "== TSan: Gloo and CPU backend tests (build-tsan)"
tsan_targets=(gloo_collectives_test gloo_faults_test gloo_multiprocess_test gloo_bandwidth_test gloo_send_recv_test cpu_stream_test
              data_sampling_test data_param_init_test cpu_training_prop_test gloo_tcp_store_test
              cpu_communicator_test gloo_file_store_test cpu_context_parallel_test)
cmake -S . -B build-tsan "${san_flags[@]}" -DFULLSHARD_TSAN=ON -DFULLSHARD_RC_MAX_SUCCESS=20 > /dev/null
build_step build-tsan --target "${tsan_targets[@]}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp"
ctest --test-dir build-tsan --output-on-failure -j "$jobs" --timeout 900 -R '^(Gloo|TcpStore|StreamWorker|ParamInit|TextCorpus|RealTraining|CpuCommunicator|CpuContextParallel)' "$@"
