#!/usr/bin/env bash
# The timeline page in a real browser: headless Chromium opens the generated HTML from disk
# (no network), the page must draw (its script sets <body data-chart-status="drawn">, stacked
# areas and the peak marker are in the DOM), log nothing to the console, and pass its own
# interaction self-test (page.html#selftest: hover tooltip with op, wheel zoom, drag pan,
# category toggle). Screenshots are saved in the build directory (timeline.png,
# timeline-compare.png) for people and CI artifacts.
# Skips (exit 77, which ctest shows as skipped, and a SKIPPED line) only when no Chromium is
# installed: tools/test.sh installs
# Debian's `chromium` package (tools/deps.sh).
set -eu
bin="$1"; src="$2"
build="$(cd "$(dirname "$bin")/.." && pwd)"
# FULLSHARD_BROWSER names the browser binary ("none": behave as if there were none).
browser="${FULLSHARD_BROWSER:-}"
if [ -z "$browser" ]; then
  for c in chromium chromium-browser google-chrome; do
    if command -v "$c" > /dev/null 2>&1; then browser="$c"; break; fi
  done
fi
if [ -z "$browser" ] || [ "$browser" = none ]; then
  echo "SKIPPED: no headless Chromium found (install Debian's chromium package: tools/test.sh does it when it can)"
  exit 77
fi
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
# The shipped tiny scenario trains 200 steps; 2 make a readable picture and a quick test.
sed 's/"steps": [0-9]*/"steps": 2/' "$src/scenarios/tiny-llama-cpu2.json" > "$tmp/tiny.json"
"$bin" simulate "$tmp/tiny.json" --json "$tmp/r.json" --timeline "$tmp/timeline.html" > /dev/null 2>&1
python3 - "$tmp/r.json" "$tmp/measured.json" <<'P'
import json, sys
r = json.load(open(sys.argv[1]))
tl = r["memory_timeline"][0]
json.dump({"label": "measured", "scenario": r["scenario"], "capacity_bytes": r["capacity_bytes"],
           "memory_timeline": [{"rank": 0, "time_s": [t * 1.05 for t in tl["time_s"]],
                                "allocated_bytes": [a + 65536 for a in tl["allocated_bytes"]]}]},
          open(sys.argv[2], "w"))
P
"$bin" plot "$tmp/r.json" "$tmp/measured.json" -o "$tmp/compare.html" > /dev/null

# A fresh profile each run; no network is needed (the page is self-contained).
run_browser() {  # run_browser OUTFILE ARGS...
  local out="$1"; shift
  timeout 90 "$browser" --headless --disable-gpu --no-sandbox --no-first-run --disable-extensions \
    --user-data-dir="$tmp/profile" --enable-logging=stderr --v=0 --virtual-time-budget=5000 "$@" \
    > "$out" 2> "$out.stderr" || { echo "FAIL: $browser exited with $?"; tail -5 "$out.stderr"; exit 1; }
}
fail=0
check_page() {  # check_page NAME FILE MIN_AREAS SCREENSHOT
  local name="$1" page="$2" min_areas="$3" shot="$4"
  run_browser "$tmp/$name.dom" --dump-dom "file://$page#selftest"
  local body; body="$(grep -o '<body[^>]*>' "$tmp/$name.dom" | head -1)"
  local areas; areas=$(grep -o 'class="area"' "$tmp/$name.dom" | wc -l)
  local problems=""
  echo "$body" | grep -q 'data-chart-status="drawn"' || problems+=" not drawn ($body);"
  echo "$body" | grep -q 'data-selftest="pass"' || problems+=" self-test: $(echo "$body" | grep -o 'data-selftest="[^"]*"');"
  [ "$areas" -ge "$min_areas" ] || problems+=" $areas stacked areas (want >= $min_areas);"
  grep -q 'class="peak-marker primary"' "$tmp/$name.dom" || problems+=" no peak marker;"
  grep -q 'id="errors" hidden' "$tmp/$name.dom" || problems+=" errors shown: $(grep -o '<div id="errors"[^<]*' "$tmp/$name.dom");"
  if grep -q "CONSOLE" "$tmp/$name.dom.stderr"; then problems+=" console output: $(grep CONSOLE "$tmp/$name.dom.stderr" | head -3);"; fi
  run_browser "$tmp/$name.shot" --window-size=1280,1000 --screenshot="$shot" "file://$page"
  [ -s "$shot" ] || problems+=" no screenshot;"
  if [ -n "$problems" ]; then
    echo "FAIL $name:$problems"; fail=1
  else
    echo "ok   $name: drawn, $areas stacked areas, self-test passed, no console output; screenshot $shot"
  fi
}
check_page timeline "$tmp/timeline.html" 5 "$build/timeline.png"
check_page compare "$tmp/compare.html" 5 "$build/timeline-compare.png"
# Expert parallelism (docs/plots.md, "Mixture of experts"): the routed-tokens line, the
# all-to-all lane and the peak card's MoE parts are drawn.
sed 's/"steps": [0-9]*/"steps": 2/' "$src/scenarios/tiny-moe-ep2-cpu4.json" > "$tmp/moe.json"
"$bin" simulate "$tmp/moe.json" --timeline "$tmp/moe.html" > /dev/null 2>&1
check_page moe "$tmp/moe.html" 5 "$build/timeline-moe.png"
for want in 'class="routed"' 'class="a2a"' 'of which mixture of experts'; do
  grep -q "$want" "$tmp/moe.dom" || { echo "FAIL moe: no $want in the drawn page"; fail=1; }
done
exit $fail
