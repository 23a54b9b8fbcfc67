#!/usr/bin/env bash
# Issue 4's performance figures in one run: OpenBLAS sgemm throughput with all cores (the
# ceiling), then `fullshard train` of a scenario (default gpt2-124m-cpu2, 2 ranks) for a few
# steps: tokens/s, achieved FLOP/s as a fraction of sgemm's, exposed communication.
#   tools/bench_cpu_training.sh [SCENARIO] [STEPS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source tools/deps.sh
fullshard_install_deps
scenario="${1:-scenarios/gpt2-124m-cpu2.json}"
steps="${2:-5}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFULLSHARD_BUILD_TESTS=OFF > /dev/null
cmake --build build --target fullshard bench_sgemm -j "$(nproc)" > /dev/null
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
OPENBLAS_NUM_THREADS="$(nproc)" build/bin/bench_sgemm --benchmark_filter='BM_Sgemm/1024' \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_format=json > "$tmp/sgemm.json"
build/bin/fullshard train "$scenario" --steps "$steps" --metrics "$tmp/m.jsonl"
python3 - "$tmp/sgemm.json" "$tmp/m.jsonl" "$(nproc)" <<'P'
import json, sys
bench = json.load(open(sys.argv[1]))
peak = max(b["FLOP/s"] for b in bench["benchmarks"] if b.get("aggregate_name") == "median")
rows = [json.loads(l) for l in open(sys.argv[2])][1:] or [json.loads(l) for l in open(sys.argv[2])]
t = sum(r["step_time_s"] for r in rows)
tok = sum(r["tokens_per_s"] * r["step_time_s"] for r in rows)
fl = sum(r["flops_per_s"] * r["step_time_s"] for r in rows)
ex = sum(r["exposed_comm_s"] for r in rows)
print(f"sgemm 1024^3 with {sys.argv[3]} threads: {peak/1e9:.1f} GFLOP/s (median of 3)")
print(f"training (steps after the first): {t/len(rows):.3f} s/step, {tok/t:.1f} tokens/s, "
      f"{fl/t/1e9:.1f} GFLOP/s = {100*fl/t/peak:.1f}% of sgemm, exposed communication {100*ex/t:.1f}% of the step")
P
