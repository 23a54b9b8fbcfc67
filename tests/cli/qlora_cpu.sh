#!/usr/bin/env bash
# QLoRA on the CPU backend (docs/qlora.md): scenarios/tiny-llama-qlora-cpu2.json trains its LoRA
# adapters over an NF4 base on 2 ranks over Gloo, its loss falls, and the simulator's peak
# allocated and reserved bytes equal the measured ones on both ranks, to the byte.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
sc="$src/scenarios/tiny-llama-qlora-cpu2.json"
"$bin" compare "$sc" --steps 30 --json "$tmp/cmp.json" --metrics "$tmp/m.jsonl" > "$tmp/cmp.out" 2>&1 \
  || { cat "$tmp/cmp.out"; exit 1; }
python3 - "$tmp/cmp.json" "$tmp/m.jsonl" <<'P'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["equal"] is True and len(c["ranks"]) == 2, c
for r in c["ranks"]:
    assert r["predicted_peak_allocated_bytes"] == r["measured_peak_allocated_bytes"], r
    assert r["predicted_peak_reserved_bytes"] == r["measured_peak_reserved_bytes"], r
loss = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(loss) == 30, len(loss)
first, last = loss[0], sum(loss[-5:]) / 5
assert last < first - 0.5, (first, last)
print(f"loss {first:.4f} -> {last:.4f} (last 5 mean); peaks equal on both ranks")
P
echo "ok qlora compare"
# The CUDA backend has no NF4 kernel: refused before anything starts, naming the field.
if "$bin" train "$sc" --steps 1 --backend cuda > "$tmp/cuda.out" 2>&1; then
  echo "train --backend cuda accepted an NF4 scenario"; exit 1
fi
grep -q "training.frozen_dtype: is \"nf4\", which the cuda backend does not run" "$tmp/cuda.out" \
  || { cat "$tmp/cuda.out"; exit 1; }
echo "ok cuda refused"
