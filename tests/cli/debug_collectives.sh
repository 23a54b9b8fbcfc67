#!/usr/bin/env bash
# --debug-collectives end to end: two ranks started torchrun-style (RANK, WORLD_SIZE, a shared
# FULLSHARD_STORE_DIR) from scenario files that disagree on the parameter dtype, so their
# all-gathers differ. With fingerprints exchanged before each collective, both ranks stop at
# once with one line saying who issued what, instead of corrupting or hanging.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
cp "$src/scenarios/tiny-llama-cpu2.json" "$tmp/fp32.json"
python3 - "$tmp/fp32.json" "$tmp/bf16.json" <<'P'
import json, sys
s = json.load(open(sys.argv[1]))
s.pop("$schema", None)
json.dump(s, open(sys.argv[1], "w"))
s["fsdp"]["mixed_precision"] = {"param_dtype": "bf16"}
json.dump(s, open(sys.argv[2], "w"))
P
start=$(date +%s)
set +e
RANK=0 WORLD_SIZE=2 FULLSHARD_STORE_DIR="$tmp/store" "$bin" train "$tmp/fp32.json" --backend gloo --steps 2 \
  --timeout 30 --debug-collectives > /dev/null 2> "$tmp/r0" &
p0=$!
RANK=1 WORLD_SIZE=2 FULLSHARD_STORE_DIR="$tmp/store" "$bin" train "$tmp/bf16.json" --backend gloo --steps 2 \
  --timeout 30 --debug-collectives > /dev/null 2> "$tmp/r1" &
p1=$!
wait $p0; rc0=$?
wait $p1; rc1=$?
set -e
took=$(( $(date +%s) - start ))
[ "$rc0" -ne 0 ] && [ "$rc1" -ne 0 ] || { echo "both ranks must fail (rc $rc0, $rc1)"; cat "$tmp/r0" "$tmp/r1"; exit 1; }
# Found by the fingerprints, well before the 30 s timeout.
[ "$took" -lt 20 ] || { echo "took $took s: the mismatch was not caught by the fingerprints"; cat "$tmp/r0"; exit 1; }
for f in "$tmp/r0" "$tmp/r1"; do
  grep -q "issued all_gather" "$f" || { echo "no fingerprint report:"; cat "$f"; exit 1; }
  grep -q "bf16" "$f" && grep -q "fp32" "$f" || { echo "the report must show both dtypes:"; cat "$f"; exit 1; }
done
echo ok
