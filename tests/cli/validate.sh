#!/usr/bin/env bash
# tools/validate/validate.py on the published torchtitan A100 rows (issue 10's validation).
# Issue 10's bars: tokens/s within 10% on every row and 5% on average, both OOM rows predicted
# OOM, MFU never above what the same GEMMs reach alone. They all hold (docs/cost-model.md:
# scenarios at model.implementation torchtitan-2024 on the a100-80gb-p4de profile, mean 2.2%,
# worst row -7.8%), so validate.py must exit 0 and this test keeps every bar.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
rc=0
python3 "$src/tools/validate/validate.py" --fullshard "$bin" --json "$tmp/v.json" > "$tmp/out" || rc=$?
[ $rc -eq 0 ] || { cat "$tmp/out"; echo "validate.py exited $rc: a bar of issue 10 does not hold"; exit 1; }
python3 - "$tmp/v.json" <<'P'
import json, sys
v = json.load(open(sys.argv[1]))
rows = v["rows"]
assert len(rows) == 10, len(rows)
for r in rows:
    assert r["published_oom"] == r["predicted_oom"], r
    if r["predicted_mfu"] is not None:
        assert 0 < r["predicted_mfu"] <= r["gemm_ceiling"], r
    if "error" in r:
        assert abs(r["error"]) <= 0.10, r
assert sum("error" in r for r in rows) == 8
assert sum(r["predicted_oom"] for r in rows) == 2
assert v["mean_abs_error"] <= 0.05, v["mean_abs_error"]
P
echo "ok: $(tail -n 1 "$tmp/out")"
