#!/usr/bin/env bash
# The per-op table (issue 28 item 5; NOTE [Per-op times] in core/report/key_averages.h) on a real
# CPU-backend run: the --metrics JSONL and the measured report carry it per step with measured
# and predicted seconds; `compare` prints the keys where they differ most; `plot` draws both.
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
export TMPDIR="$tmp"
fail() { echo "FAIL: $*"; exit 1; }
"$bin" train "$src/scenarios/tiny-llama-cpu2.json" --steps 3 --metrics "$tmp/m.jsonl" --json "$tmp/r.json" \
  > "$tmp/train.out" 2> "$tmp/train.err" || { cat "$tmp/train.err"; fail "train"; }
grep -q "per-op table (rank 0, last step): [0-9]* keys, .* s measured, .* s predicted" "$tmp/train.out" ||
  { cat "$tmp/train.out"; fail "train prints no per-op summary"; }
python3 - "$tmp/m.jsonl" "$tmp/r.json" <<'P' || fail "tables"
import json, re, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 3
for m in lines:
    ops = m["ops"]
    assert ops, m["step"]
    keys = set()
    for row in ops:
        assert not re.search(r"\.\d+(\.|\s|$)", row["key"]), row["key"]   # layer index folded out
        assert (row["key"], row["kind"]) not in keys; keys.add((row["key"], row["kind"]))
        assert row["calls"] > 0 and row["measured_s"] >= 0
        assert row["predicted_s"] is not None and row["predicted_s"] >= 0 and (row["predicted_s"] > 0 or row["flops"] == 0), row
        if row["measured_s"] > 0:
            assert abs(row["flops_per_s"] - row["flops"] / row["measured_s"]) <= 1e-6 * row["flops_per_s"] + 1e-9
            assert abs(row["bytes_per_s"] - row["bytes"] / row["measured_s"]) <= 1e-6 * row["bytes_per_s"] + 1e-9
    measured = sum(r["measured_s"] for r in ops)
    assert 0 < measured <= m["step_time_s"], (measured, m["step_time_s"])
    # tiny-llama has 2 layers: each per-layer op is launched twice a step, under one key.
    wq = [r for r in ops if r["key"] == "layers.attention.wq" and r["kind"] == "Linear"]
    assert len(wq) == 1 and wq[0]["calls"] == 2, wq
    assert any(r["kind"] == "AdamW" or "AdamW" in r["key"] for r in ops), [r["key"] for r in ops]
rep = json.load(open(sys.argv[2]))
per_step = rep["ops_per_step"]
assert [p["step"] for p in per_step] == [0, 1, 2] and all(p["rank"] == 0 for p in per_step)
for p, m in zip(per_step, lines):
    assert p["ops"] == m["ops"]
P
"$bin" compare "$src/scenarios/tiny-llama-cpu2.json" --steps 2 --json "$tmp/c.json" > "$tmp/c.out" 2> "$tmp/c.err" ||
  { cat "$tmp/c.out" "$tmp/c.err"; fail "compare"; }
python3 - "$tmp/c.out" "$tmp/c.json" <<'P' || { cat "$tmp/c.out"; fail "compare's differ-most lines"; }
import json, sys
out = open(sys.argv[1]).read().splitlines()
i = out.index("  ops where measured and predicted differ most:")
rows = out[i + 2:i + 7]
ops = json.load(open(sys.argv[2]))["ops"]
gap = sorted(ops, key=lambda r: -abs(r["measured_s"] - r["predicted_s"]))
assert len(rows) == min(5, len(ops))
for line, want in zip(rows, gap):
    label = want["key"] + " (" + want["kind"] + ")"
    assert line.strip().startswith(label[:45]), (line, label)
    assert "%.6f" % want["predicted_s"] in line and "%.6f" % want["measured_s"] in line, line
P
"$bin" plot "$tmp/m.jsonl" -o "$tmp/curves.svg" > /dev/null 2> "$tmp/e" || { cat "$tmp/e"; fail "plot"; }
python3 - "$tmp/curves.svg" "$tmp/m.jsonl" <<'P' || fail "plot's per-op panel"
import json, sys, xml.dom.minidom
svg = open(sys.argv[1]).read()
xml.dom.minidom.parseString(svg)
assert "per-op time of step 3" in svg
ops = [json.loads(l) for l in open(sys.argv[2])][-1]["ops"]
n = min(12, len(ops))
assert svg.count("<title>measured ") == n and svg.count("<title>predicted ") == n, (svg.count("<title>measured "), n)
top = max(ops, key=lambda r: max(r["measured_s"], r["predicted_s"]))
assert "<title>measured %.6f s</title>" % top["measured_s"] in svg
assert "<title>predicted %.6f s</title>" % top["predicted_s"] in svg
P
echo "ok: per-op table"
