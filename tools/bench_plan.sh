#!/usr/bin/env bash
# Issue 5's speed figure: configurations the planner evaluates per second, wall clock of the
# whole `fullshard plan` process (start-up, bounds, simulations, writing OUT.json), for
# llama3.1-70b on 256 h100-sxm-80gb GPUs (32 nodes x 8) at 8K context.
#   tools/bench_plan.sh [RUNS] [extra plan flags...]      e.g. tools/bench_plan.sh 3 --global-batch 512
# Builds Release into $FULLSHARD_BUILD_DIR (default build/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
runs="${1:-3}"
shift || true
build="${FULLSHARD_BUILD_DIR:-build}"
if [ -z "${FULLSHARD_NO_BUILD:-}" ]; then
  source tools/deps.sh
  fullshard_install_deps
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFULLSHARD_BUILD_TESTS=OFF > /dev/null
  cmake --build "$build" --target fullshard -j "$(nproc)" > /dev/null
fi
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
cmd=("$build/bin/fullshard" plan --model llama3.1-70b --gpus 256 --gpus-per-node 8 --gpu h100-sxm-80gb
     --seq-len 8192 --json "$tmp/plan.json" "$@")
echo "machine: $(nproc) hardware threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "command: ${cmd[*]}"
rates=()
for i in $(seq "$runs"); do
  t0=$(date +%s.%N)
  "${cmd[@]}" > "$tmp/out" 2> /dev/null || { rc=$?; [ $rc -eq 3 ] || { cat "$tmp/out"; exit $rc; }; }
  t1=$(date +%s.%N)
  line=$(python3 - "$tmp/plan.json" "$t0" "$t1" <<'P'
import json, sys
p = json.load(open(sys.argv[1])); wall = float(sys.argv[3]) - float(sys.argv[2])
print(f"{p['evaluated']} {wall:.3f} {p['evaluated'] / wall:.0f} {p['simulated']} {p['memory_pruned']} "
      f"{p['time_pruned']} {p['full_simulations']} {p['bound_simulations']}")
P
)
  read -r n wall rate sim mem time full bound <<< "$line"
  rates+=("$rate")
  echo "run $i: $n configurations in $wall s wall = $rate configs/s ($sim simulated exactly, $mem ruled out by" \
       "memory bounds, $time by time bounds; $full full and $bound 2-block simulations)"
done
median=$(printf '%s\n' "${rates[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "median: $median configurations/s"
grep '^recommended' "$tmp/out" || true
