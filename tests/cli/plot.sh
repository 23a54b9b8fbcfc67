#!/usr/bin/env bash
# Pictures from the CLI: `simulate --timeline/--trace`, `plot` to HTML and SVG (one report,
# predicted vs a measured-style report without labels, two configurations), and bad input
# (one line naming the flag or path, exit 2). The page in a browser: plot_browser.sh.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
# The shipped tiny scenario trains 200 steps; 2 make a readable picture and a quick test.
sed 's/"steps": [0-9]*/"steps": 2/' "$src/scenarios/tiny-llama-cpu2.json" > "$tmp/tiny.json"
"$bin" simulate "$tmp/tiny.json" --json "$tmp/r.json" --timeline "$tmp/t.html" \
  --trace "$tmp/trace.json" > "$tmp/out" 2> /dev/null
grep -q "timeline written to $tmp/t.html" "$tmp/out"
grep -q "trace written to $tmp/trace.json" "$tmp/out"
grep -q 'id="plot-data"' "$tmp/t.html"
"$bin" simulate "$tmp/tiny.json" --timeline "$tmp/t.svg" > /dev/null 2>&1
grep -q "<svg" "$tmp/t.svg"

# A measured-style report: per-rank timelines with only time and allocated bytes.
python3 - "$tmp/r.json" "$tmp/measured.json" <<'P'
import json, sys
r = json.load(open(sys.argv[1]))
tl = r["memory_timeline"][0]
m = {"label": "measured", "scenario": r["scenario"], "capacity_bytes": r["capacity_bytes"],
     "memory_timeline": [{"rank": rk, "time_s": [t * 1.1 for t in tl["time_s"]],
                          "allocated_bytes": tl["allocated_bytes"]} for rk in tl["ranks"]]}
json.dump(m, open(sys.argv[2], "w"))
P
"$bin" plot "$tmp/r.json" "$tmp/measured.json" -o "$tmp/cmp.html" | grep -q "plot written to $tmp/cmp.html"
"$bin" plot "$tmp/r.json" "$tmp/measured.json" -o "$tmp/cmp.svg" --rank 1 --title "predicted & measured" > /dev/null
python3 - "$tmp/cmp.html" "$tmp/cmp.svg" <<'P'
import json, re, sys, xml.dom.minidom
html = open(sys.argv[1]).read()
assert "<script src" not in html and "<link" not in html, "external resources"
data = json.loads(re.search(r'id="plot-data">(.*?)</script>', html, re.S).group(1))
assert [r["label"] for r in data["reports"]] == ["r", "measured"], data["reports"][0]["label"]
assert "what" in data["reports"][0]["series"][0] and "what" not in data["reports"][1]["series"][0]
svg = xml.dom.minidom.parse(sys.argv[2])  # well-formed XML
text = open(sys.argv[2]).read()
assert "predicted &amp; measured" in text
assert text.count('class="area"') >= 3, "stacked areas"
assert "peak " in text and "(off scale)" in text
P

# Two configurations side by side: another scenario's report.
sed 's/"batch_per_rank": [0-9]*/"batch_per_rank": 4/' "$tmp/tiny.json" | \
  sed 's/"name": "[^"]*"/"name": "tiny-b4"/' > "$tmp/b4.json"
"$bin" simulate "$tmp/b4.json" --json "$tmp/r4.json" > /dev/null 2>&1
"$bin" plot "$tmp/r.json" "$tmp/r4.json" -o "$tmp/two.svg" > /dev/null
grep -q "tiny-b4" "$tmp/two.svg"

# The trace parses and has the phases Perfetto shows.
python3 - "$tmp/trace.json" <<'P'
import json, sys
t = json.load(open(sys.argv[1]))
ph = {e["ph"] for e in t["traceEvents"]}
assert {"M", "X", "C", "s", "f", "i"} <= ph, ph
P

# Bad input: one line, exit 2.
fail=0
expect() {  # expect NAME SUBSTRING -- ARGS...
  local name="$1" want="$2"; shift 3
  "$bin" "$@" > "$tmp/o" 2> "$tmp/e"; local rc=$?
  local lines; lines=$(wc -l < "$tmp/e")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" "$tmp/e"; then
    echo "FAIL $name: rc=$rc lines=$lines stderr:"; cat "$tmp/e"; fail=1
  else
    echo "ok   $name: $(cat "$tmp/e")"
  fi
}
set +e
expect missing-report "no-such.json" -- plot "$tmp/no-such.json" -o "$tmp/x.html"
echo '{"scenario": "x", "ranks": []}' > "$tmp/compare.json"
expect no-timeline "has no memory_timeline" -- plot "$tmp/compare.json" -o "$tmp/x.html"
echo '{"memory_timeline": [' > "$tmp/broken.json"
expect not-json "malformed JSON" -- plot "$tmp/broken.json" -o "$tmp/x.html"
expect bad-extension "-o: is '$tmp/x.png'" -- plot "$tmp/r.json" -o "$tmp/x.png"
expect unknown-rank "--rank: is 9" -- plot "$tmp/r.json" -o "$tmp/x.svg" --rank 9
expect timeline-extension "--timeline" -- simulate "$tmp/tiny.json" --timeline "$tmp/t.txt"
expect trace-extension "--trace" -- simulate "$tmp/tiny.json" --trace "$tmp/t.html"
expect trace-unwritable "does not exist" -- simulate "$tmp/tiny.json" --trace "$tmp/no/dir/t.json"
expect no-output "-o" -- plot "$tmp/r.json"
exit $fail
