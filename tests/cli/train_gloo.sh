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

# A rank killed at the start of step 1: the other stops within the timeout (5 s here: short,
# but long enough for a loaded machine to finish the rendezvous of step 0).
start=$(date +%s)
set +e
FULLSHARD_FAULT=kill:1:1 "$bin" train "$sc" --backend gloo --nproc 2 --steps 3 --timeout 5 > /dev/null 2> "$tmp/kill"; rc=$?
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
FULLSHARD_FAULT=stall:0:1 "$bin" train "$sc" --backend gloo --nproc 2 --steps 3 --timeout 5 > /dev/null 2> "$tmp/stall"; rc=$?
set -e
[ "$rc" -ne 0 ] || { echo "a stalled rank must fail the run"; exit 1; }
grep -qi "rank 1: .*\(all_gather\|reduce_scatter\|all_reduce\)" "$tmp/stall" || { cat "$tmp/stall"; exit 1; }
no_workers_left
echo ok stall

# The measured report has the simulator's format: it plots, and overlays a prediction.
"$bin" train "$sc" --backend gloo --steps 2 --json "$tmp/measured.json" > /dev/null 2>&1
"$bin" simulate "$sc" --json "$tmp/predicted.json" > /dev/null 2>&1
python3 - "$tmp/measured.json" "$tmp/predicted.json" <<'P'
import json, sys
m, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert m["measured"] is True and m["world_size"] == 2
assert len(m["ranks"]) == 2 and len(m["memory_timeline"]) == 2
for rk in m["ranks"]:
    assert sum(rk["breakdown_at_peak"].values()) == rk["peak_allocated_bytes"], rk
for tl in m["memory_timeline"]:
    t = tl["time_s"]
    assert len(t) > 10 and all(a <= b for a, b in zip(t, t[1:])), "times must not go back"
    assert max(tl["allocated_bytes"]) == m["ranks"][tl["ranks"][0]]["peak_allocated_bytes"]
    assert len(tl["what"]) == len(t) and any(w for w in tl["what"])
# The steps of the measured run equal the simulated ones: same peaks.
assert [r["peak_allocated_bytes"] for r in m["ranks"]] == [r["peak_allocated_bytes"] for r in p["ranks"]]
P
"$bin" plot "$tmp/predicted.json" "$tmp/measured.json" -o "$tmp/overlay.svg" > /dev/null
grep -q "<svg" "$tmp/overlay.svg"
echo ok measured report
