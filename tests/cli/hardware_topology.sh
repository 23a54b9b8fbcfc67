#!/usr/bin/env bash
# Profiles and the node they describe: hardware.gpus_per_node above a GPU profile's node is an
# error naming both values (NOTE [Ranks per node]), fewer is a job on part of each node, a CPU
# host runs any number of ranks; the Grand Teton and GH200 144GB profiles load and simulate;
# cuda_total_memory_bytes (torch's total_memory) must lie within nvidia-smi's total and leave
# the driver's reserve inside non_allocator_bytes (NOTE [Two device totals]).
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT

scenario() {  # profile, nodes, gpus_per_node -> $tmp/s.json
  printf '{"model": "tiny-llama", "training": {"seq_len": 64}, "hardware": {"profile": "%s", "nodes": %s, "gpus_per_node": %s}}\n' \
    "$1" "$2" "$3" > "$tmp/s.json"
}
expect_exit() {  # code, text, args...
  local code="$1" text="$2"; shift 2
  set +e; "$bin" "$@" > "$tmp/out" 2>&1; local rc=$?; set -e
  [ "$rc" -eq "$code" ] || { echo "expected exit $code, got $rc: $*"; cat "$tmp/out"; exit 1; }
  grep -q -- "$text" "$tmp/out" || { echo "no '$text' in:"; cat "$tmp/out"; exit 1; }
}

# More ranks per node than the 8-GPU HGX node holds: exit 2, both values and the fix.
scenario h100 2 16
expect_exit 2 "hardware.gpus_per_node: is 16, but profile 'h100-sxm-80gb' describes a node of 8 GPUs" simulate "$tmp/s.json"
grep -q "use at most 8 GPUs per node (more nodes for more GPUs)" "$tmp/out"
[ "$(wc -l < "$tmp/out")" -eq 1 ] || { echo "not one line:"; cat "$tmp/out"; exit 1; }
scenario gh200 1 8
expect_exit 2 "describes a node of 4 GPUs" simulate "$tmp/s.json"
# Fewer is fine, and so is any count on a CPU host.
scenario h100 2 4
"$bin" simulate "$tmp/s.json" > /dev/null
scenario cpu 1 4
"$bin" simulate "$tmp/s.json" > /dev/null

# The planner's flag is checked alike and named.
expect_exit 2 "--gpus-per-node: is 16, but profile 'h100-sxm-80gb' describes a node of 8 GPUs" \
  plan --model tiny-llama --gpus 32 --gpus-per-node 16 --gpu h100 --seq-len 64

# The new profiles, by name and alias.
for p in h100-grand-teton grand-teton gh200-144gb gh200-hbm3e; do
  scenario "$p" 1 4
  "$bin" simulate "$tmp/s.json" > "$tmp/sim.out" || { echo "profile $p"; cat "$tmp/sim.out"; exit 1; }
done

# cuda_total_memory_bytes above nvidia-smi's total, and a non_allocator_bytes below the driver's
# reserve: errors in the profile file naming the figure.
python3 - "$src/scenarios/hardware/h100-sxm-80gb.json" "$tmp" <<'P'
import json, sys
p = json.load(open(sys.argv[1]))
a = dict(p, name="over"); a["cuda_total_memory_bytes"] = p["memory_bytes"] + 1
json.dump(a, open(sys.argv[2] + "/over.json", "w"))
b = dict(p, name="under"); b["non_allocator_bytes"] = p["memory_bytes"] - p["cuda_total_memory_bytes"] - 1
json.dump(b, open(sys.argv[2] + "/under.json", "w"))
P
for f in over under; do
  printf '{"model": "tiny-llama", "training": {"seq_len": 64}, "hardware": {"profile": "%s.json"}}\n' "$f" > "$tmp/p-$f.json"
done
expect_exit 2 "cuda_total_memory_bytes: is 85520809985, more than memory_bytes 85520809984" simulate "$tmp/p-over.json"
expect_exit 2 "non_allocator_bytes: is 492830719, less than the driver's reserve" simulate "$tmp/p-under.json"
echo ok
