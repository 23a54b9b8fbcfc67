#!/usr/bin/env bash
# `fullshard train --backend gloo` and `fullshard compare` with real worker processes:
# metrics per step, predicted == measured memory, and failures (a killed or stalled rank)
# that stop every rank within the timeout, exit non-zero and leave no process behind.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
# A private copy so that pgrep can find exactly this test's workers.
cp "$src/scenarios/tiny-llama-cpu2.json" "$tmp/tiny-$$.json"
sc="$tmp/tiny-$$.json"

"$bin" train "$sc" --backend gloo --nproc 2 --steps 3 --metrics "$tmp/m.jsonl" > "$tmp/out" 2> "$tmp/err"
grep -q "trained 3 steps" "$tmp/out" || { cat "$tmp/out" "$tmp/err"; exit 1; }
python3 - "$tmp/m.jsonl" <<'P'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == [0, 1, 2], rows
for r in rows:
    for k in ["step", "loss", "tokens_per_s", "peak_allocated_bytes"]:
        assert k in r, k
    assert 4.0 < r["loss"] < 6.5, r["loss"]     # ~ln(256) at the start
    assert r["tokens_per_s"] > 0 and r["peak_allocated_bytes"] > 0
P
echo ok train

"$bin" compare "$sc" --steps 2 --json "$tmp/c.json" > "$tmp/cmp" 2> "$tmp/cmperr" || { cat "$tmp/cmp" "$tmp/cmperr"; exit 1; }
grep -q "to the byte on every rank" "$tmp/cmp"
python3 - "$tmp/c.json" <<'P'
import json, sys
c = json.load(open(sys.argv[1]))
assert len(c["ranks"]) == 2
for r in c["ranks"]:
    assert r["predicted_peak_allocated_bytes"] == r["measured_peak_allocated_bytes"] > 0, r
    assert r["predicted_peak_reserved_bytes"] == r["measured_peak_reserved_bytes"] > 0, r
P
echo ok compare

# Bad input: one line, exit 2, no worker started.
set +e
"$bin" train "$sc" --backend gloo --nproc 3 > /dev/null 2> "$tmp/bad"; rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "expected exit 2 for --nproc 3, got $rc"; cat "$tmp/bad"; exit 1; }
grep -q "nproc" "$tmp/bad"

no_workers_left() {
  sleep 0.5
  if pgrep -f "train $sc" > /dev/null; then echo "workers left behind:"; pgrep -af "train $sc"; exit 1; fi
}

# A rank killed at the start of step 1: the other stops within the timeout (3 s here).
start=$(date +%s)
set +e
FULLSHARD_FAULT=kill:1:1 "$bin" train "$sc" --backend gloo --nproc 2 --steps 3 --timeout 3 > /dev/null 2> "$tmp/kill"; rc=$?
set -e
took=$(( $(date +%s) - start ))
[ "$rc" -ne 0 ] || { echo "a killed rank must fail the run"; exit 1; }
grep -q "rank 1" "$tmp/kill" || { cat "$tmp/kill"; exit 1; }
grep -qi "rank 0: .*\(all_gather\|reduce_scatter\|all_reduce\)" "$tmp/kill" || { echo "rank 0's error must name the collective"; cat "$tmp/kill"; exit 1; }
[ "$took" -lt 30 ] || { echo "took $took s"; exit 1; }
no_workers_left
echo ok kill

# A rank that stalls: the other times out naming the collective; the staller is killed.
set +e
FULLSHARD_FAULT=stall:0:1 "$bin" train "$sc" --backend gloo --nproc 2 --steps 3 --timeout 2 > /dev/null 2> "$tmp/stall"; rc=$?
set -e
[ "$rc" -ne 0 ] || { echo "a stalled rank must fail the run"; exit 1; }
grep -qi "rank 1: .*\(all_gather\|reduce_scatter\|all_reduce\)" "$tmp/stall" || { cat "$tmp/stall"; exit 1; }
no_workers_left
echo ok stall
