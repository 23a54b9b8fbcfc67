#!/usr/bin/env bash
# Issue 13, item 5 (outputs outside training): an output that is also an input is refused, a
# failed write (a full disk: /dev/full) is an error with exit code != 0, and no run leaves a
# 0-byte, partial or temporary file behind (errors, SIGINT, SIGTERM).
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # check NAME CONDITION-COMMAND...
  local name="$1"; shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; cat "$tmp/err" 2>/dev/null; fail=1; fi
}
# expect NAME RC SUBSTRING -- ARGS: exit code RC and SUBSTRING on stderr
expect() {
  local name="$1" want_rc="$2" want="$3"; shift 4
  timeout 300 "$bin" "$@" > "$tmp/out" 2> "$tmp/err" < /dev/null; local rc=$?
  if [ "$rc" -ne "$want_rc" ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL $name: rc=$rc (want $want_rc), stderr:"; cat "$tmp/err"; fail=1
  else
    echo "ok   $name: $(tail -1 "$tmp/err")"
  fi
}
only_inputs_left() {  # nothing but the named files in $tmp/w
  local extra; extra=$(cd "$tmp/w" && ls -A | grep -vxF -f "$tmp/inputs" || true)
  [ -z "$extra" ] || { echo "  left behind: $extra"; return 1; }
}
mkdir -p "$tmp/w"
cp "$src/scenarios/tiny-llama-cpu2.json" "$tmp/w/s.json"
printf '{"profile": "h100", "collectives": [{"collective": "all_gather", "gpus_per_node": 8, "bytes": 1073741824, "busbw_gbs": 300}]}' > "$tmp/w/m.json"
printf 's.json\nm.json\n' > "$tmp/inputs"
before=$(sha256sum "$tmp/w/s.json" "$tmp/w/m.json")

# ---- an output that is an input is refused before anything is written
expect simulate-json-is-input 2 "is also an input" -- simulate "$tmp/w/s.json" --json "$tmp/w/s.json"
expect simulate-json-same-file-other-name 2 "is also an input" -- simulate "$tmp/w/s.json" --json "$tmp/w/../w/s.json"
ln -s s.json "$tmp/w/link.json"; echo link.json >> "$tmp/inputs"
expect simulate-json-symlink-to-input 2 "is also an input" -- simulate "$tmp/w/s.json" --json "$tmp/w/link.json"
expect simulate-trace-is-json 2 "is also an input" -- simulate "$tmp/w/s.json" --json "$tmp/w/r.json" --trace "$tmp/w/r.json"
expect calibrate-output-is-input 2 "is also an input" -- calibrate "$tmp/w/m.json" -o "$tmp/w/m.json"
expect plan-write-scenario-is-input 2 "is also an input" -- plan --scenario "$tmp/w/s.json" --gpus 2 --write-scenario "$tmp/w/s.json"
ln -s s.json "$tmp/w/s-link.html"; echo s-link.html >> "$tmp/inputs"
expect plot-output-is-input 2 "is also an input" -- plot "$tmp/w/s.json" -o "$tmp/w/s-link.html"
check inputs-unchanged [ "$before" = "$(sha256sum "$tmp/w/s.json" "$tmp/w/m.json")" ]
check no-files-after-refusals only_inputs_left

# ---- a full disk: every write is checked
ln -s /dev/full "$tmp/w/full.json"; ln -s /dev/full "$tmp/w/full.html"; printf 'full.json\nfull.html\n' >> "$tmp/inputs"
expect simulate-json-dev-full 2 "No space left on device" -- simulate "$tmp/w/s.json" --json /dev/full
expect simulate-trace-dev-full 2 "No space left on device" -- simulate "$tmp/w/s.json" --trace "$tmp/w/full.json"
expect calibrate-dev-full-link 2 "No space left on device" -- calibrate "$tmp/w/m.json" -o "$tmp/w/full.json"
expect plan-json-dev-full 2 "No space left on device" -- plan --scenario "$tmp/w/s.json" --gpus 2 --json "$tmp/w/full.json"
expect simulate-timeline-dev-full 2 "No space left on device" -- simulate "$tmp/w/s.json" --timeline "$tmp/w/full.html"
# /dev/null is a fine output (written directly, not replaced)
expect simulate-json-dev-null 0 "" -- simulate "$tmp/w/s.json" --json /dev/null
check dev-null-still-a-device [ -c /dev/null ]
check no-files-after-full-disk only_inputs_left

# ---- failures after the outputs were named leave no file
echo '{"model": "tiny-llama", "training": {"seq_len": -1}, "hardware": {"profile": "cpu"}}' > "$tmp/w/bad.json"
echo bad.json >> "$tmp/inputs"
expect bad-scenario-no-output 2 "training.seq_len" -- simulate "$tmp/w/bad.json" --json "$tmp/w/r.json" --trace "$tmp/w/t.json" --timeline "$tmp/w/t.html"
expect missing-folder 2 "does not exist" -- simulate "$tmp/w/s.json" --json "$tmp/w/no/such/dir/r.json"
check no-files-after-errors only_inputs_left

# ---- a good run writes complete files and no temporary ones
"$bin" simulate "$tmp/w/s.json" --json "$tmp/w/r.json" --trace "$tmp/w/t.json" --timeline "$tmp/w/t.html" > /dev/null 2>&1
check outputs-complete python3 -c "import json,sys; [json.load(open(f)) for f in sys.argv[1:]]" "$tmp/w/r.json" "$tmp/w/t.json"
printf 'r.json\nt.json\nt.html\n' >> "$tmp/inputs"
check no-temporary-files only_inputs_left

# ---- SIGINT / SIGTERM during a long simulation: nothing written, nothing left
# A background job of a script starts with SIGINT ignored (and fullshard keeps an ignored
# SIGINT ignored); the wrapper gives it the default disposition an interactive run has.
for sig in INT TERM; do
  python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
    "$bin" simulate "$src/scenarios/llama3.1-70b-fsdp1024-h100.json" --ranks all --json "$tmp/w/big.json" \
    --trace "$tmp/w/big-trace.json" > /dev/null 2>&1 &
  pid=$!
  sleep 2
  kill -s "$sig" "$pid"
  wait "$pid"; rc=$?
  check "sig$sig-exit-code-$rc" [ "$rc" -ne 0 ]
  check "sig$sig-no-partial-files" only_inputs_left
done
exit $fail
