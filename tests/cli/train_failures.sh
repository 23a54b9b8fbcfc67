#!/usr/bin/env bash
# Issue 13's training failures, each with its reproducing input: a diverging run stops with a
# line naming the step, rank and value (or goes on with --on-nonfinite continue); a failed run
# never replaces earlier metrics nor an input file; bad flags are refused; a GPU scenario on CPU
# workers is refused when the host lacks the memory; SIGTERM stops workers and cleans up.
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
export TMPDIR="$tmp/t"; mkdir -p "$TMPDIR"  # the launcher's rendezvous directories land here
fail() { echo "FAIL: $*"; exit 1; }
python3 - "$src/scenarios/tiny-llama-cpu2.json" "$tmp" <<'P'
import json, sys
s = json.load(open(sys.argv[1]))
d = json.loads(json.dumps(s)); d["training"]["optimizer"].update(lr=1e20, max_grad_norm=0); d["training"]["steps"] = 6
json.dump(d, open(sys.argv[2] + "/div.json", "w"))
l = json.loads(json.dumps(s)); l["training"]["steps"] = 400
json.dump(l, open(sys.argv[2] + "/long.json", "w"))
P

# 1. Divergence stops: exit 1, one line with rank, value and step; the earlier metrics survive.
echo "earlier run" > "$tmp/m.jsonl"
"$bin" train "$tmp/div.json" --metrics "$tmp/m.jsonl" > "$tmp/out" 2> "$tmp/err"; rc=$?
[ $rc -eq 1 ] || fail "diverging run exit $rc"; 
grep -q "the loss is nan at step 2: training diverged; stopped" "$tmp/err" || { cat "$tmp/err"; fail "no divergence line"; }
grep -q "json.exception" "$tmp/err" && fail "launcher crashed on null"
[ "$(cat "$tmp/m.jsonl")" = "earlier run" ] || fail "earlier metrics replaced"
python3 - "$tmp/m.jsonl.partial" <<'P' || fail "partial metrics"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == [0, 1], rows
assert rows[1]["loss"] is None and rows[1]["nonfinite"] is True, rows[1]
assert rows[0]["nonfinite"] is False
P
[ -z "$(ls -A "$TMPDIR")" ] || fail "rendezvous directory left: $(ls "$TMPDIR")"
pgrep -f "$tmp/div.json" > /dev/null && fail "workers left behind"

# 2. --on-nonfinite continue: all steps, exit 0, a warning, null losses in the metrics.
"$bin" train "$tmp/div.json" --on-nonfinite continue --metrics "$tmp/c.jsonl" > "$tmp/out" 2> "$tmp/err"; rc=$?
[ $rc -eq 0 ] || { cat "$tmp/err"; fail "continue exit $rc"; }
grep -q "going on (--on-nonfinite continue)" "$tmp/err" || fail "no warning"
[ "$(wc -l < "$tmp/c.jsonl")" -eq 6 ] || fail "continue did not run 6 steps"
"$bin" train "$tmp/div.json" --on-nonfinite maybe > /dev/null 2>&1; [ $? -eq 2 ] || fail "--on-nonfinite maybe accepted"

# 3. Bad flags and outputs: one line, exit 2, nothing destroyed.
cp "$tmp/div.json" "$tmp/keep.json"
"$bin" train "$tmp/div.json" --metrics "$tmp/div.json" > /dev/null 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--metrics: is the scenario file" "$tmp/err" || fail "metrics == scenario: $rc $(cat "$tmp/err")"
cmp -s "$tmp/div.json" "$tmp/keep.json" || fail "scenario destroyed"
for args in "--steps -5" "--steps -1" "--timeout 2147483647" "--timeout 0" "--nproc -1" "--nproc 0"; do
  "$bin" train "$tmp/div.json" $args > /dev/null 2> "$tmp/err"; rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "'$args': exit $rc: $(cat "$tmp/err")"
  grep -q -- "^fullshard: error: ${args% *}: is ${args#* }" "$tmp/err" || fail "'$args': $(cat "$tmp/err")"
done
# compare takes the same run flags.
"$bin" compare "$tmp/div.json" --nproc 0 > /dev/null 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "^fullshard: error: --nproc: is 0" "$tmp/err" || fail "compare --nproc 0: $rc $(cat "$tmp/err")"

# --metrics that is not a regular file is written as it is, never renamed over: a FIFO stays a
# FIFO and gets the rows; a full device (a copy of /dev/full) stays a device, and the failed
# write stops the run (as root, `--metrics /dev/full` once left /dev/full a regular file).
mkfifo "$tmp/m.fifo"
timeout 120 cat "$tmp/m.fifo" > "$tmp/fifo.jsonl" &  # a regression must fail, not hang
reader=$!
"$bin" train "$src/scenarios/tiny-llama-cpu2.json" --steps 2 --metrics "$tmp/m.fifo" > /dev/null 2> "$tmp/err"; rc=$?
wait $reader
[ $rc -eq 0 ] && [ -p "$tmp/m.fifo" ] && [ ! -e "$tmp/m.fifo.partial" ] || fail "metrics to a FIFO: exit $rc $(cat "$tmp/err")"
[ "$(wc -l < "$tmp/fifo.jsonl")" -eq 2 ] || fail "metrics to a FIFO: $(wc -l < "$tmp/fifo.jsonl") rows"
if mknod "$tmp/full" c 1 7 2> /dev/null && [ -c "$tmp/full" ]; then
  "$bin" train "$src/scenarios/tiny-llama-cpu2.json" --steps 2 --metrics "$tmp/full" > /dev/null 2> "$tmp/err"; rc=$?
  [ -c "$tmp/full" ] || fail "the --metrics device was replaced: $(ls -l "$tmp/full")"
  [ $rc -ne 0 ] && grep -q "writing the metrics to '$tmp/full' failed" "$tmp/err" || fail "metrics to a full device: exit $rc $(cat "$tmp/err")"
fi

# 4. A GPU scenario on CPU workers that would need more host memory than there is: refused.
"$bin" train "$src/scenarios/llama3.1-8b-fsdp8-h100.json" --backend cpu > /dev/null 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "hardware.memory_bytes: lets each of 8 CPU workers use" "$tmp/err" || fail "gpu on cpu: $rc $(cat "$tmp/err")"
# Without --backend, a GPU scenario wants GPUs: a one-line error on a machine without them.
"$bin" train "$src/scenarios/llama3.1-8b-fsdp8-h100.json" > /dev/null 2> "$tmp/err"; rc=$?
if nvidia-smi -L > /dev/null 2>&1; then :; else
  [ $rc -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "gpu scenario without gpu: $rc $(cat "$tmp/err")"
fi

# 5. SIGTERM: workers stopped, exit 130, a line saying what was done, no rendezvous left.
"$bin" train "$tmp/long.json" --metrics "$tmp/l.jsonl" > "$tmp/out" 2> "$tmp/err" &
pid=$!
for _ in $(seq 100); do [ -s "$tmp/l.jsonl.partial" ] && break; sleep 0.1; done
kill -TERM $pid; wait $pid; rc=$?
[ $rc -eq 130 ] || { cat "$tmp/err"; fail "SIGTERM exit $rc"; }
grep -q "interrupted by SIGTERM after" "$tmp/err" || fail "no interruption line"
[ -s "$tmp/l.jsonl.partial" ] && [ ! -e "$tmp/l.jsonl" ] || fail "metrics after SIGTERM"
sleep 0.5
pgrep -f "$tmp/long.json" > /dev/null && fail "workers left after SIGTERM"
[ -z "$(ls -A "$TMPDIR")" ] || fail "rendezvous directory left after SIGTERM"
echo "ok"
