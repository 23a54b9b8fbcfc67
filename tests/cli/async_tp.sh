#!/usr/bin/env bash
# Asynchronous tensor parallelism (tensor_parallel.async): the simulator plays it and says
# where its symmetric memory went; training for real refuses it in one line.
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0
python3 - "$src/scenarios/llama3.1-70b-fsdp32-tp8-h100.json" "$tmp/async.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s.setdefault("tensor_parallel", {})["async"] = True
s["model"] = {"name": s["model"], "implementation": {"compile": True}}  # async TP runs under torch.compile
json.dump(s, open(sys.argv[2], "w"))
PY
if "$bin" simulate "$tmp/async.json" > "$tmp/out" 2> "$tmp/err" &&
   grep -q "async TP symmetric memory 32.0 MiB per rank" "$tmp/out" && grep -q "tp .* (exposed" "$tmp/out"; then
  echo "ok   simulate: $(grep 'symmetric' "$tmp/out")"
else
  echo "FAIL simulate"; cat "$tmp/out" "$tmp/err"; fail=1
fi
"$bin" simulate "$tmp/async.json" --json "$tmp/r.json" > /dev/null 2>&1
if python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['symmetric_memory_bytes'] == 33554432" "$tmp/r.json"; then
  echo "ok   report symmetric_memory_bytes"
else
  echo "FAIL report symmetric_memory_bytes"; fail=1
fi
python3 - "$src/scenarios/tiny-llama-tp2-cpu4.json" "$tmp/cpu.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s.setdefault("tensor_parallel", {})["async"] = True
s["model"] = {"name": s["model"], "implementation": {"compile": True}}  # async TP runs under torch.compile
json.dump(s, open(sys.argv[2], "w"))
PY
# A CPU scenario cannot say async at all; a GPU scenario trained on CPU processes is refused.
"$bin" simulate "$tmp/cpu.json" > "$tmp/out" 2> "$tmp/err"; rc=$?
if [ "$rc" -ne 0 ] && grep -q "tensor_parallel.async: is true on the CPU profile" "$tmp/err" && [ "$(wc -l < "$tmp/err")" -eq 1 ]; then
  echo "ok   cpu profile: $(cat "$tmp/err")"
else
  echo "FAIL cpu profile (rc $rc)"; cat "$tmp/err"; fail=1
fi
timeout 120 "$bin" train "$tmp/async.json" --backend cpu --steps 1 > "$tmp/out" 2> "$tmp/err" < /dev/null; rc=$?
if [ "$rc" -ne 0 ] && grep -q "tensor_parallel.async: is true, which the cpu backend does not run" "$tmp/err"; then
  echo "ok   train refuses: $(tail -1 "$tmp/err")"
else
  echo "FAIL train (rc $rc)"; cat "$tmp/err"; fail=1
fi
# The planner keeps async for its tp candidates that can run it (not with selective_op), and
# the scenario it writes simulates.
cat > "$tmp/tiny.json" <<'JSON'
{"name": "tiny-async", "model": {"name": "tiny-llama", "implementation": {"compile": true}}, "training": {"seq_len": 64, "steps": 2},
 "fsdp": {"mesh": {"shape": [2, 2], "dim_names": ["dp_shard", "tp"]}},
 "tensor_parallel": {"async": true}, "hardware": {"profile": "h100-sxm-80gb", "nodes": 1, "gpus_per_node": 4}}
JSON
if timeout 300 "$bin" plan --scenario "$tmp/tiny.json" --gpus 4 --tp 2 --write-scenario "$tmp/best.json" > "$tmp/out" 2> "$tmp/err" &&
   python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
runs = j['fsdp']['mesh']['shape'][-1] == 2 and j['training']['activation_checkpointing'] != 'selective_op'
assert j['tensor_parallel']['async'] is runs, j" "$tmp/best.json" &&
   "$bin" simulate "$tmp/best.json" > "$tmp/out2" 2>> "$tmp/err"; then
  echo "ok   plan keeps async for tp candidates"
else
  echo "FAIL plan"; cat "$tmp/out" "$tmp/err"; fail=1
fi
exit $fail
