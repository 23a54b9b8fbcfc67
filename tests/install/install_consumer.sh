#!/usr/bin/env bash
# Installs the built tree into a fresh prefix, runs the installed CLI from another working
# directory, then builds tests/install/consumer with find_package(fullshard) against that prefix
# and checks that its C++-API simulation gives the peaks `fullshard simulate --json` prints.
# Usage: install_consumer.sh BUILD_DIR SOURCE_DIR CMAKE CXX_COMPILER BUILD_TYPE
set -euo pipefail
build=$1 src=$2 cmake=$3 cxx=$4 build_type=$5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

"$cmake" --install "$build" --prefix "$prefix" > "$work/install.log"
for f in bin/fullshard share/fullshard/scenarios/hardware/h100-sxm-80gb.json \
         include/fullshard/simulator/simulate.h lib/libfullshard_cpu_kernels.a \
         lib/cmake/fullshard/fullshard-config.cmake \
         lib/cmake/fullshard/fullshard-config-version.cmake lib/cmake/fullshard/fullshard-targets.cmake; do
  [[ -e $prefix/$f ]] || { echo "FAIL: the install tree lacks $f"; exit 1; }
done

# The installed CLI finds its data beside itself, from any working directory, with the source
# tree out of reach of a relative path.
scenario=$prefix/share/fullshard/scenarios/llama3.1-8b-fsdp8-h100.json
mkdir "$work/elsewhere"
cd "$work/elsewhere"
unset FULLSHARD_DATA_DIR
"$prefix/bin/fullshard" --version | tee "$work/version.txt"
grep -q '0\.1\.0' "$work/version.txt" || { echo "FAIL: --version names no version"; exit 1; }
"$prefix/bin/fullshard" simulate "$scenario" --json "$work/report.json" > "$work/simulate.txt"

# The consumer: configure + build against the prefix only.
"$cmake" -S "$src/tests/install/consumer" -B "$work/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$build_type" \
  > "$work/consumer-configure.log" 2>&1 || { cat "$work/consumer-configure.log"; exit 1; }
"$cmake" --build "$work/consumer" -j2 > "$work/consumer-build.log" \
  || { cat "$work/consumer-build.log"; exit 1; }
FULLSHARD_DATA_DIR=$prefix/share/fullshard/scenarios "$work/consumer/peak_memory" "$scenario" \
  > "$work/consumer.txt"

python3 - "$work/report.json" "$work/consumer.txt" <<'PY'
import json, sys
cli = [c["peak_allocated_bytes"] for c in json.load(open(sys.argv[1]))["rank_classes"]]
lib = [int(l) for l in open(sys.argv[2]).read().split()]
assert cli and all(p > 0 for p in cli), f"no peaks in the CLI's report: {cli}"
assert lib == cli, f"C++ API peaks {lib} != fullshard simulate --json peaks {cli}"
print(f"ok: installed CLI and installed library agree: peak allocated {cli} bytes per rank class")
PY
