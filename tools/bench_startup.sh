#!/usr/bin/env bash
# Issue 28's start-up figure: `fullshard train` of a scenario (default the ~374M Llama of
# tools/bench/llama-380m-cpu2.json on 2 CPU ranks) for STEPS steps (default 1), timed from the
# launcher's start to its exit; prints the wall time, the steps' time (the metrics' step_time_s)
# and their difference: the time outside training steps (processes, rendezvous, building the
# program, parameter init, teardown). User and system CPU of all processes beside it: on a
# machine shared with other work, the wall times stretch and the CPU times much less.
#   tools/bench_startup.sh [FULLSHARD_BINARY] [SCENARIO] [STEPS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build/bin/fullshard}"
scenario="${2:-$root/tools/bench/llama-380m-cpu2.json}"
steps="${3:-1}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
TIMEFORMAT='%R %U %S'
{ time "$bin" train "$scenario" --steps "$steps" --metrics "$tmp/m.jsonl" > "$tmp/out.txt" 2>&1; } 2> "$tmp/time.txt" \
  || { cat "$tmp/out.txt"; exit 1; }
python3 - "$tmp/time.txt" "$tmp/m.jsonl" "$steps" <<'P'
import json, sys
wall, user, sys_ = (float(x) for x in open(sys.argv[1]).read().split()[-3:])
rows = [json.loads(l) for l in open(sys.argv[2])] if int(sys.argv[3]) > 0 else []
steps = sum(r["step_time_s"] for r in rows)
print(f"wall {wall:.2f} s, training steps {steps:.2f} s ({len(rows)}), outside the steps {wall - steps:.2f} s; "
      f"CPU user {user:.2f} s, system {sys_:.2f} s (all processes)")
P
