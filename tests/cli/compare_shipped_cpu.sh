#!/usr/bin/env bash
# Every shipped CPU scenario (scenarios/*cpu*.json), 2 steps: the simulator's peak allocated
# and reserved bytes equal what the CPU backend measures, on every rank, to the byte.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
for sc in "$src"/scenarios/*cpu*.json; do
  name="$(basename "$sc" .json)"
  "$bin" compare "$sc" --steps 2 --json "$tmp/$name.json" > "$tmp/$name.out" 2>&1 \
    || { echo "compare failed for $name"; cat "$tmp/$name.out"; exit 1; }
  python3 - "$tmp/$name.json" <<'P'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["equal"] is True and len(c["ranks"]) == c["world_size"]
for r in c["ranks"]:
    assert r["predicted_peak_allocated_bytes"] == r["measured_peak_allocated_bytes"], r
    assert r["predicted_peak_reserved_bytes"] == r["measured_peak_reserved_bytes"], r
P
  echo "ok $name"
done
