#!/usr/bin/env bash
# Builds fullshard with its tests (into build-test/) and runs the whole ctest suite.
# Property tests use a fixed rapidcheck seed (set in tests/CMakeLists.txt) so CI is repeatable.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source tools/deps.sh
fullshard_install_deps
build="${FULLSHARD_TEST_BUILD:-build-test}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
