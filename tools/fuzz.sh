#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, NOTE [Fuzz targets]) with clang into build-fuzz/
# and runs each for SECONDS (default 60) on its seed corpus tests/fuzz/corpus/<target>/ plus
# a working corpus build-fuzz/corpus/<target>/ that grows across runs.
#   tools/fuzz.sh [SECONDS] [TARGET ...]     targets: scenario hardware_profile hf_config
#                                           calibration_csv calibration_json report safetensors
#                                           checkpoint_metadata
# Findings (crash-*, leak-*, timeout-*, oom-*) are written to build-fuzz/findings/; the script
# prints one line per target (executions, corpus size, findings) and exits 1 if any was found.
# Reproduce one with: build-fuzz/bin/fuzz_<target> build-fuzz/findings/<target>-crash-...
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
secs="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(scenario hardware_profile hf_config calibration_csv calibration_json report safetensors
                                      checkpoint_metadata)
command -v clang++ > /dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang)" >&2; exit 2; }
launcher=()
if command -v ccache > /dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DFULLSHARD_FUZZ=ON -DFULLSHARD_BUILD_TESTS=OFF \
  -DFULLSHARD_WITH_CUDA=OFF -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON "${launcher[@]}" > /dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
mkdir -p build-fuzz/findings
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
found=0
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  log="build-fuzz/fuzz_$t.log"
  # -rss_limit_mb: a parser must not need GBs for a 64 KiB input; -timeout: nor seconds.
  set +e
  "build-fuzz/bin/fuzz_$t" "build-fuzz/corpus/$t" "tests/fuzz/corpus/$t" -max_total_time="$secs" \
    -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/findings/$t-" > "$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  n=$(ls "build-fuzz/corpus/$t" | wc -l)
  if [ "$rc" -ne 0 ]; then
    found=1
    echo "fuzz_$t: FINDING after ${execs} executions (exit $rc); see $log and build-fuzz/findings/$t-*"
    grep -m3 -E "ERROR|runtime error|terminate called|what\(\)" "$log" || true
  else
    echo "fuzz_$t: ${execs} executions in ${secs} s, ${cov}, corpus ${n} inputs, no finding"
  fi
done
exit $found
