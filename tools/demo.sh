#!/usr/bin/env bash
# Quick start: build fullshard (Release, into build/), simulate one training step of
# Llama 3.1 8B with FSDP over 8 H100s, print the summary and write the report.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source tools/deps.sh
fullshard_install_deps
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFULLSHARD_BUILD_TESTS=OFF > /dev/null
cmake --build build --target fullshard
scenario="${1:-scenarios/llama3.1-8b-fsdp8-h100.json}"
report="build/$(basename "${scenario%.json}")-report.json"
./build/bin/fullshard simulate "$scenario" --json "$report"
