#!/usr/bin/env bash
# Pipeline parallelism from the command line (docs/pipeline.md): the shipped pp scenario
# simulates and reports its pipeline; the real backends refuse a pp dim in one line naming the
# field, exit code 2 (simulated only).
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # expect NAME SUBSTRING -- ARGS...
  local name="$1" want="$2"; shift 3
  "$bin" "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  local lines; lines=$(wc -l < "$tmp/err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL $name: rc=$rc lines=$lines stderr:"; cat "$tmp/err"; fail=1
  else
    echo "ok   $name: $(cat "$tmp/err")"
  fi
}
sc="$src/scenarios/tiny-llama-pp2-fsdp2-h100.json"
if "$bin" simulate "$sc" --json "$tmp/r.json" > "$tmp/out" 2>&1; then
  python3 - "$tmp/r.json" <<'P' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
assert not r.get("problems"), r.get("problems")
p = r["pipeline"]
assert p["schedule"] == "1F1B" and p["pp"] == 2 and p["microbatches"] == 4, p
assert p["peak_in_flight_microbatches"] == [2, 1], p
assert 0 < p["schedule_bubble"] < 1, p
P
  grep -q "pipeline: 1F1B over pp 2" "$tmp/out" || { echo "FAIL no pipeline line:"; cat "$tmp/out"; fail=1; }
  echo "ok   simulate tiny-llama-pp2"
else
  echo "FAIL simulate tiny-llama-pp2:"; cat "$tmp/out"; fail=1
fi
expect train-cpu-refused "fsdp.mesh.dim_names: has a pp dim of size 2: pipeline parallelism is simulated only" \
  -- train "$sc" --steps 1 --backend cpu
# The CUDA backend refuses it too where it is built (elsewhere `--backend cuda` is refused itself).
"$bin" train "$sc" --steps 1 --backend cuda > "$tmp/out" 2> "$tmp/err"; rc=$?
if grep -qF "pp dim" "$tmp/err"; then
  expect train-cuda-refused "fsdp.mesh.dim_names: has a pp dim of size 2" \
    -- train "$sc" --steps 1 --backend cuda
else
  echo "skip train-cuda-refused: $(cat "$tmp/err")"
fi
expect plan-refused "sets pipeline_parallel" -- plan --scenario "$sc"
exit $fail
