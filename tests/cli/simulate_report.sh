#!/usr/bin/env bash
# `fullshard simulate` on a shipped scenario: exit 0, a summary, a JSON report with the
# documented keys; an OOM scenario exits 3 with the breakdown.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
"$bin" simulate "$src/scenarios/tiny-llama-cpu2.json" --json "$tmp/r.json" > "$tmp/out"
grep -q "peak allocated" "$tmp/out"
grep -q "ok: no collective mismatch" "$tmp/out"
python3 - "$tmp/r.json" <<'P'
import json, sys
r = json.load(open(sys.argv[1]))
for k in ["ranks", "step_time_s", "exposed_comm_s", "tokens_per_s_per_gpu", "mfu", "memory_timeline"]:
    assert k in r, k
assert len(r["ranks"]) == 2
for rk in r["ranks"]:
    for k in ["rank", "peak_allocated_bytes", "peak_reserved_bytes", "breakdown_at_peak"]:
        assert k in rk, k
    assert sum(rk["breakdown_at_peak"].values()) == rk["peak_allocated_bytes"]
P
sed 's/"gpus_per_node": 2/"gpus_per_node": 2, "memory_bytes": 1048576/' "$src/scenarios/tiny-llama-cpu2.json" > "$tmp/oom.json"
set +e
"$bin" simulate "$tmp/oom.json" > "$tmp/oom.out" 2>&1; rc=$?
set -e
[ "$rc" -eq 3 ] || { echo "expected exit 3 for OOM, got $rc"; cat "$tmp/oom.out"; exit 1; }
grep -q "OUT OF MEMORY" "$tmp/oom.out"
echo ok
"$bin" models --json > "$tmp/models.json"
python3 - "$tmp/models.json" <<'P'
import json, sys
m = {x["name"]: x["params"] for x in json.load(open(sys.argv[1]))}
assert m["llama3.1-8b"] == 8030261248, m["llama3.1-8b"]
assert m["gpt2-124m"] == 124439808
P
echo ok models
