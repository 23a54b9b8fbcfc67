#!/usr/bin/env bash
# `fullshard plot` of training curves (issue 14 item 3): a real run's --metrics overlaid with
# another trainer's step,loss CSV, as HTML and SVG; bad inputs are one-line errors.
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
export TMPDIR="$tmp"
fail() { echo "FAIL: $*"; exit 1; }
"$bin" train "$src/scenarios/tiny-llama-cpu2.json" --steps 4 --metrics "$tmp/fullshard.jsonl" > /dev/null 2>&1 || fail "train"
printf 'step,loss,tokens_per_s\n1,5.60,1000\n2,5.41,1100\n3,nan,1050\n4,5.02,1200\n' > "$tmp/pytorch.csv"
for out in curves.svg curves.html; do
  "$bin" plot "$tmp/fullshard.jsonl" "$tmp/pytorch.csv" -o "$tmp/$out" > "$tmp/o" 2> "$tmp/e" || { cat "$tmp/e"; fail "plot $out"; }
  grep -q "training curves of 2 run(s) written to" "$tmp/o" || fail "no summary line for $out"
done
python3 - "$tmp/curves.svg" "$tmp/curves.html" "$tmp/fullshard.jsonl" <<'P' || fail "picture"
import json, sys, xml.dom.minidom
svg = open(sys.argv[1]).read()
xml.dom.minidom.parseString(svg)                       # well-formed
assert "training: fullshard vs pytorch" in svg
for panel in (">loss<", ">tokens/s (all ranks)<", ">peak allocated ("):
    assert panel in svg, panel
assert svg.count("<path d=") == 5, svg.count("<path d=")  # loss x2, tokens/s x2, memory x1
last = [json.loads(l) for l in open(sys.argv[3])][-1]["loss"]
assert "last loss %.4f" % last in svg
html = open(sys.argv[2]).read()
assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "<td>5.0200</td>" in html
P
# Errors: exit 2, one line naming the file, line and field.
printf 'step,loss\n1,5.6\n2,abc\n' > "$tmp/bad.csv"
"$bin" plot "$tmp/bad.csv" -o "$tmp/x.svg" > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "bad.csv:3: loss: is 'abc'" "$tmp/e" && [ "$(wc -l < "$tmp/e")" -eq 1 ] || { cat "$tmp/e"; fail "bad csv (exit $rc)"; }
[ -e "$tmp/x.svg" ] && fail "an output was written for a bad input"
"$bin" plot "$tmp/fullshard.jsonl" -o "$tmp/x.svg" --rank 1 > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--rank" "$tmp/e" || { cat "$tmp/e"; fail "--rank with curves (exit $rc)"; }
echo "ok: training curves"
