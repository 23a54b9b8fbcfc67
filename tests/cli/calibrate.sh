#!/usr/bin/env bash
# `fullshard calibrate`: fits the h100 profile to nccl-tests-style measurements and kernel
# timings, writes a fitted profile a scenario can name, and rejects bad input with exit 2.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/m.json" <<'J'
{
  "profile": "h100",
  "collectives": [
    {"collective": "all_gather", "nodes": 1, "gpus_per_node": 8, "bytes": 1073741824, "busbw_gbs": 300},
    {"collective": "reduce_scatter", "nodes": 1, "gpus_per_node": 8, "bytes": 268435456, "busbw_gbs": 290},
    {"collective": "all_gather", "nodes": 2, "gpus_per_node": 8, "bytes": 1073741824, "busbw_gbs": 250}
  ],
  "kernels": [{"op": "matmul", "dtype": "bf16", "flops": 962e9, "bytes": 1.3e8, "time_s": 0.0014}]
}
J
"$bin" calibrate "$tmp/m.json" -o "$tmp/h100-fitted.json" > "$tmp/out"
grep -q "intra_node_bus_bandwidth" "$tmp/out"
grep -q "matmul_efficiency" "$tmp/out"
grep -q "typical error" "$tmp/out"
python3 - "$tmp/h100-fitted.json" <<'P'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["name"] == "h100-fitted", p["name"]
assert 250e9 < p["intra_node_bus_bandwidth"] < 350e9, p["intra_node_bus_bandwidth"]
assert "fitted by fullshard calibrate" in p["sources"]["intra_node_bus_bandwidth"]
assert p["matmul_efficiency"][0][1] < 0.95
P
# The fitted profile drives a scenario.
sed 's/"profile": "h100-sxm-80gb"/"profile": "h100-fitted.json"/' "$src/scenarios/llama3.1-8b-fsdp8-h100.json" \
  | sed 's#"\$schema": "../docs/scenario.schema.json", ##' > "$tmp/s.json"
"$bin" simulate "$tmp/s.json" > "$tmp/sim.out"
grep -q "nccl+roofline" "$tmp/sim.out"
set +e
echo '{"collectives": [{"collective": "allgather", "bytes": 1, "time_us": 1}]}' > "$tmp/bad.json"
"$bin" calibrate "$tmp/bad.json" --hardware h100 > "$tmp/bad.out" 2>&1; rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "expected exit 2, got $rc"; cat "$tmp/bad.out"; exit 1; }
grep -q "collectives\[0\].collective" "$tmp/bad.out"
# Several files fit together: FSDP2 hook samples (tools/measure/fsdp_hooks.py -o) beside the
# JSON; the fitted profile cites both and prices the hooks on the line through them.
printf '# fsdp_hooks.py\nop,params,time_s\nfsdp_hook,2,1.2e-4\nfsdp_hook,10,1.6e-4\n' > "$tmp/hooks.csv"
"$bin" calibrate "$tmp/m.json" "$tmp/hooks.csv" -o "$tmp/h100-both.json" > "$tmp/both.out"
grep -q "from m.json, hooks.csv: 3 collective and 1 kernel samples, 2 direct" "$tmp/both.out"
python3 - "$tmp/h100-both.json" <<'P'
import json, sys
p = json.load(open(sys.argv[1]))
assert abs(p["fsdp_hook_s"] - 1.1e-4) < 1e-12 and abs(p["fsdp_hook_param_s"] - 5e-6) < 1e-15, p
assert "m.json, hooks.csv" in p["sources"]["fsdp_hook_param_s"], p["sources"]["fsdp_hook_param_s"]
assert 250e9 < p["intra_node_bus_bandwidth"] < 350e9
P
set +e
echo '{"profile": "a100", "kernels": []}' > "$tmp/a100.json"
"$bin" calibrate "$tmp/m.json" "$tmp/a100.json" > "$tmp/two.out" 2>&1; rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "expected exit 2 for two profiles, got $rc"; cat "$tmp/two.out"; exit 1; }
grep -q "a100.json: profile: is \"a100\" but .*m.json says \"h100\"" "$tmp/two.out"
# NOTE [Fitted figures are checked] (calibrate_commands.cc): samples that fit a figure outside
# its range (a kernel gap of 5 s; a copy so fast its bandwidth is infinite) are refused, and the
# old output is kept.
for sample in '{"op": "kernel_gap", "time_s": 5}|the fitted kernel_gap_s is 5.0, must be >= 0 and <= 1' \
              '{"op": "copy_pinned", "bytes": 1e300, "time_s": 1e-300}|the fitted pinned_copy_bandwidth is inf, not a finite number'; do
  echo "{\"profile\": \"h100\", \"kernels\": [${sample%%|*}]}" > "$tmp/odd.json"
  cp "$tmp/h100-both.json" "$tmp/keep.json"
  set +e
  "$bin" calibrate "$tmp/odd.json" -o "$tmp/keep.json" > /dev/null 2> "$tmp/odd.err"; rc=$?
  set -e
  [ "$rc" -eq 2 ] && [ "$(wc -l < "$tmp/odd.err")" -eq 1 ] && grep -qF -- "--output: ${sample#*|}" "$tmp/odd.err" ||
    { echo "expected one line and exit 2, got $rc"; cat "$tmp/odd.err"; exit 1; }
  cmp -s "$tmp/h100-both.json" "$tmp/keep.json" || { echo "the refused fit replaced the old output"; exit 1; }
done
echo ok

# The shipped measured H200 profile is what calibrate fits to the shipped measurements (the
# 2026-11-28 GPU run), launch-bound samples left out (NOTE [Launch-bound samples]) and the
# attention samples excluded as the profile's description says.
m="$src/scenarios/hardware/measurements"
"$bin" calibrate "$m/h200-2026-11-28.csv" "$m/h200-2026-11-28-blas_workspace.json" --hardware h200 \
  --exclude attention attention_backward --per-sample -o "$tmp/h200-refit.json" > "$tmp/h200.out"
grep -q "2 kernel samples left out: no longer than the host's launch" "$tmp/h200.out"
grep -q "kernel_gap not fitted" "$tmp/h200.out"
grep -q "2 kernel samples of the --exclude classes left out" "$tmp/h200.out"
grep -Eq "^    matmul: 15 samples, typical error" "$tmp/h200.out"
[ "$(grep -c 'launch-bound: not fitted' "$tmp/h200.out")" -eq 2 ]
# As NOTE [Converting kernels] (simulator/cost/dtype_conversion.h): the two bf16 -> fp32 casts (out_dtype fp32) are their own class and
# fit convert_memory_factor, which prices them to within a few percent where the one
# memory_efficiency table was 2x off; the fp32 -> bf16 type_as stays a vector sample.
grep -q "convert_memory_factor: 1.0 -> 0\.[3-6]" "$tmp/h200.out"
python3 - "$tmp/h200.out" <<'P'
import re, sys
out = open(sys.argv[1]).read()
before, after = map(float, re.search(r"^    convert: 2 samples, typical error ([\d.]+)% before, ([\d.]+)% after", out, re.M).groups())
assert before > 50 and after < 5, (before, after)
assert re.search(r"^    vector: 10 samples", out, re.M), "the vector class keeps its 10 same-dtype samples"
P
python3 - "$tmp/h200-refit.json" "$src/scenarios/hardware/h200-141gb-measured.json" <<'P'
import json, sys
refit, shipped = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
skip = {"name", "description", "aliases"}
diff = [k for k in sorted(set(refit) | set(shipped)) if k not in skip and refit.get(k) != shipped.get(k)]
assert not diff, f"the shipped h200-141gb-measured.json differs from a refit in {diff}"
assert shipped["kernel_gap_s"] == 2e-06  # the datasheet profile's: the sample was launch-bound
assert 0.3 < shipped["convert_memory_factor"] < 0.7, shipped["convert_memory_factor"]
assert "fitted by fullshard calibrate" in shipped["sources"]["convert_memory_factor"]
P
# The measured profile drives a scenario by name.
sed 's/"profile": "h100-sxm-80gb"/"profile": "h200-141gb-measured"/' "$src/scenarios/llama3.1-8b-fsdp8-h100.json" \
  | sed 's#"\$schema": "../docs/scenario.schema.json", ##' > "$tmp/s200.json"
"$bin" simulate "$tmp/s200.json" > "$tmp/sim200.out"
grep -q "nccl+roofline" "$tmp/sim200.out"
# A cuBLAS workspace measurement alone sets blas_workspace_bytes.
echo '{"forward_workspace_bytes": 8388608, "backward_workspace_bytes": 4194304}' > "$tmp/ws.json"
"$bin" calibrate "$tmp/ws.json" --hardware h100 > "$tmp/ws.out"
grep -q 'blas_workspace_bytes: 33554432 -> 8388608' "$tmp/ws.out"
set +e
"$bin" calibrate "$tmp/ws.json" --hardware h100 --exclude attn > "$tmp/ex.out" 2>&1; rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "expected exit 2 for --exclude attn, got $rc"; cat "$tmp/ex.out"; exit 1; }
grep -q -- "--exclude.*'attn'.*not a kernel class" "$tmp/ex.out"
