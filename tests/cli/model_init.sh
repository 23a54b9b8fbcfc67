#!/usr/bin/env bash
# training.init from the command line (NOTE [Initialisation modes] in core/train/model_init.cc):
# on the CPU backend each mode's start-up peaks are predicted to the byte, every mode trains to
# the same losses, and a mode the program cannot copy rows for is one line naming the field.
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0
for mode in meta device broadcast_from_rank0; do
  python3 - "$src/scenarios/tiny-llama-cpu2.json" "$tmp/$mode.json" "$mode" <<'P'
import json, sys
j = json.load(open(sys.argv[1]))
j.pop("$schema", None)
j["training"]["init"] = sys.argv[3]
json.dump(j, open(sys.argv[2], "w"))
P
  if "$bin" compare "$tmp/$mode.json" --steps 2 --json "$tmp/$mode-cmp.json" > "$tmp/out" 2>&1 &&
     python3 - "$tmp/$mode-cmp.json" "$mode" <<'P'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["equal"], r
for k in r["ranks"]:
    for what in ("allocated", "reserved"):
        p, m = k[f"predicted_init_peak_{what}_bytes"], k[f"measured_init_peak_{what}_bytes"]
        assert p == m and p > 0, (sys.argv[2], k)
P
  then
    echo "ok   compare init $mode: start-up peaks equal"
  else
    echo "FAIL compare init $mode:"; cat "$tmp/out"; fail=1
  fi
  "$bin" train "$tmp/$mode.json" --steps 3 --metrics "$tmp/$mode.jsonl" > "$tmp/out" 2>&1 ||
    { echo "FAIL train init $mode:"; cat "$tmp/out"; fail=1; }
done
# The same values in the shards: the losses agree to the bit.
if python3 - "$tmp" <<'P'
import json, sys
def losses(m):
    return [json.loads(l)["loss"] for l in open(f"{sys.argv[1]}/{m}.jsonl") if "loss" in l]
ref = losses("meta")
assert len(ref) == 3, ref
for m in ("device", "broadcast_from_rank0"):
    assert losses(m) == ref, (m, losses(m), ref)
P
then
  echo "ok   every init mode trains to the same losses"
else
  fail=1
fi
# Refusals: one line on stderr naming training.init, exit code 2.
python3 - "$tmp/device.json" "$tmp/offload.json" <<'P'
import json, sys
j = json.load(open(sys.argv[1]))
j["fsdp"]["cpu_offload"] = True
json.dump(j, open(sys.argv[2], "w"))
P
"$bin" simulate "$tmp/offload.json" > "$tmp/out" 2> "$tmp/err"; rc=$?
if [ "$rc" -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "training.init" "$tmp/err"; then
  echo "ok   refused: $(cat "$tmp/err")"
else
  echo "FAIL refusal rc=$rc:"; cat "$tmp/err"; fail=1
fi
exit $fail
