#!/usr/bin/env bash
# Quick start: build fullshard (Release, into build/), simulate one training step of
# Llama 3.1 8B with FSDP over 8 H100s, print the summary and write the report. Then, with the
# default scenario, the same host program for real: train the tiny Llama on 2 CPU processes
# over Gloo and check the simulator's memory prediction against the run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source tools/deps.sh
fullshard_install_deps
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFULLSHARD_BUILD_TESTS=OFF > /dev/null
cmake --build build --target fullshard
scenario="${1:-scenarios/llama3.1-8b-fsdp8-h100.json}"
report="build/$(basename "${scenario%.json}")-report.json"
./build/bin/fullshard simulate "$scenario" --json "$report" --timeline "${report%-report.json}-timeline.html"
if [ $# -eq 0 ]; then
  echo
  ./build/bin/fullshard train scenarios/tiny-llama-cpu2.json \
    --metrics build/tiny-llama-cpu2-metrics.jsonl
  ./build/bin/fullshard compare scenarios/tiny-llama-cpu2.json --steps 2
fi
