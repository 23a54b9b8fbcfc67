#!/usr/bin/env bash
# Pipeline parallelism from the command line (docs/pipeline.md): the shipped pp scenario
# simulates and reports its pipeline; the CPU backend trains the CPU pp scenario as 4 worker
# processes (stage-to-stage send / recv over Gloo), the last stage's ranks reporting the loss;
# `--backend cuda` without a GPU and what pipeline stages do not run yet are refused in one line
# naming the field, exit code 2.
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
cpu="$src/scenarios/tiny-llama-pp2-fsdp2-cpu4.json"
if "$bin" train "$cpu" --steps 4 --metrics "$tmp/m.jsonl" > "$tmp/out" 2>&1; then
  python3 - "$tmp/m.jsonl" <<'P' || fail=1
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["step"] for l in lines] == [0, 1, 2, 3], lines
for l in lines:
    assert math.isfinite(l["loss"]) and not l["nonfinite"], l
    assert [r["rank"] for r in sorted(l["ranks"], key=lambda r: r["rank"])] == [2, 3], l["ranks"]
assert lines[-1]["loss"] < lines[0]["loss"] - 0.1, [l["loss"] for l in lines]
P
  echo "ok   train tiny-llama-pp2-fsdp2-cpu4 (4 processes)"
else
  echo "FAIL train tiny-llama-pp2-fsdp2-cpu4:"; cat "$tmp/out"; fail=1
fi
# A last-stage rank dies at step 2: a first-stage rank's send fails naming the channel and the
# peer, the launcher stops every worker, exit 1 (nothing hangs).
FULLSHARD_FAULT=kill:2:1 timeout 120 "$bin" train "$cpu" --steps 3 --timeout 10 > "$tmp/out" 2> "$tmp/err"; rc=$?
if [ "$rc" -eq 1 ] && grep -qF "rank 2: was killed by signal 9" "$tmp/err" \
   && grep -qE "rank [01]: error: gloo: rank [01] \(member 0 of group 'pipeline p2p F 0->1' \[[01],[23]\]\): send 'pipeline p2p F 0->1 microbatch [0-9]+'.* failed" "$tmp/err"; then
  echo "ok   train-cpu-stage-dies"
else
  echo "FAIL train-cpu-stage-dies: rc=$rc stderr:"; cat "$tmp/err"; fail=1
fi
expect train-cpu-checkpoint-refused "--checkpoint-every: is given with a pp dim" \
  -- train "$cpu" --steps 2 --checkpoint-every 1 --checkpoint-dir "$tmp/ck"
expect train-cpu-eval-refused "--eval-every: is given with a pp dim" \
  -- train "$cpu" --steps 2 --eval-every 1
# The mesh no longer keeps a pp dim off the CUDA backend (its NCCL / staged-Gloo transfers are
# built: docs/pipeline.md); without a GPU (or without the CUDA build) `--backend cuda` is refused
# itself, naming --backend. With a GPU, tools/gpu-check.sh trains the CPU pp scenario on it.
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  echo "skip train-cuda-refused: this machine has a GPU (tools/gpu-check.sh trains it)"
else
  expect train-cuda-refused "--backend: is 'cuda', but this" -- train "$sc" --steps 1 --backend cuda
fi
expect plan-refused "sets pipeline_parallel" -- plan --scenario "$sc"
exit $fail
