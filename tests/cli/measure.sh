#!/usr/bin/env bash
# tools/measure/measure.py without torch: --list prints the model's kernel plan (GEMM layouts,
# causal SDPA, eager kernels) from dimensions, a scenario's inline model or a zoo model through
# `fullshard models --json`; --dry-run writes calibrate's CSV with synthetic roofline times, and
# `fullshard calibrate` reads that CSV and fits the profile to it; bad input exits 2 with one line.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
m="$src/tools/measure/measure.py"
command -v python3 > /dev/null || { echo "no python3"; exit 77; }

# --list from dimensions: Llama 3.1 8B's shapes (dgrad and wgrad layouts too).
python3 "$m" --dim 4096 --n-heads 32 --n-kv-heads 8 --ffn-dim 14336 --vocab-size 128256 --seq 8192 --batch 1 --list > "$tmp/list"
grep -q "M=8192 K=4096 N=14336" "$tmp/list"     # w1 forward
grep -q "M=8192 K=14336 N=4096" "$tmp/list"     # w1 grad_input / w2 forward
grep -q "M=14336 K=8192 N=4096" "$tmp/list"     # w1 grad_weight
grep -q "M=1024 K=8192 N=4096" "$tmp/list"      # wk grad_weight (GQA: 8 kv heads x 128)
grep -q "sdpa backward.*seq=8192 head_dim=128" "$tmp/list"
grep -q "rmsnorm_eager pow" "$tmp/list"
grep -q "swiglu mul" "$tmp/list"
grep -q "copy_pinned h2d .*copy_pinned" "$tmp/list"
grep -q "kernel_gap .*kernel_gap" "$tmp/list"
# Causal attention FLOPs as core/model/ops.cc counts them: 2 B H S^2 D = 549.756 GFLOP.
grep -q "sdpa forward .*549.756" "$tmp/list"

# A zoo model named by a scenario, through `fullshard models --json`.
"$bin" models --json > "$tmp/models.json"
python3 "$m" --scenario "$src/scenarios/llama3.1-8b-fsdp8-h100.json" --models-json "$tmp/models.json" --list > "$tmp/zoo"
grep -q "^llama3.1-8b: dim 4096, heads 32/8, ffn 14336, vocab 128256; batch 1 x seq 8192, bf16" "$tmp/zoo"
# An inline model (the GPU benchmark scenario).
python3 "$m" --scenario "$src/scenarios/llama-1b-h100-bench.json" --list | grep -q "^llama-1b: dim 2048"

# --dry-run -> CSV -> fullshard calibrate: every row parses and the tables move toward the
# synthetic times (0.4 of the roofline everywhere).
python3 "$m" --dim 1024 --n-heads 8 --n-kv-heads 8 --ffn-dim 4096 --vocab-size 32000 --seq 2048 --batch 2 \
  --dry-run --efficiency 0.4 -o "$tmp/measured.csv" > "$tmp/dry.out"
grep -q "DRY RUN: synthetic roofline times" "$tmp/measured.csv"
head -n 20 "$tmp/measured.csv" | grep -q "^collective,nodes,gpus_per_node,bytes,time_us,op,dtype,flops,time_s,m,k,n,seq,head_dim,out_dtype$"
rows="$(grep -c -v '^#' "$tmp/measured.csv")"
[ "$rows" -ge 25 ] || { echo "only $rows CSV lines"; exit 1; }
"$bin" calibrate "$tmp/measured.csv" --hardware h100 -o "$tmp/h100-measured.json" > "$tmp/cal.out"
# Every line but the header is a sample: 6 direct ones (NOTE [Direct samples]), kernels the rest.
grep -q "calibrated h100-sxm-80gb from .*: 0 collective and $((rows - 7)) kernel samples, 6 direct" "$tmp/cal.out"
grep -q "matmul_efficiency" "$tmp/cal.out"
grep -q "attention_efficiency" "$tmp/cal.out"
grep -q "attention_backward_efficiency" "$tmp/cal.out"
grep -q "memory_efficiency" "$tmp/cal.out"
grep -q "norm_memory_efficiency" "$tmp/cal.out"
grep -q "rmsnorm_fused backward" "$tmp/list"
python3 - "$tmp/cal.out" "$tmp/h100-measured.json" <<'P'
import json, re, sys
out = open(sys.argv[1]).read()
before, after = map(float, re.search(r"kernels: typical error ([\d.]+)% before, ([\d.]+)% after", out).groups())
assert after < before, (before, after)
p = json.load(open(sys.argv[2]))
assert "fitted by fullshard calibrate from measured.csv" in p["sources"]["matmul_efficiency"]
# The synthetic GEMMs ran at 0.4 of peak; the table holds that / (shape factor x clock) > 0.4.
assert 0.4 < p["matmul_efficiency"][0][1] < 0.95, p["matmul_efficiency"]
# Direct samples: 1 us / 0.4, 10 us / 0.4 less the 5 us launch overhead, 50 GB/s x 0.4.
assert abs(p["kernel_gap_s"] - 2.5e-6) < 1e-12, p["kernel_gap_s"]
assert abs(p["eager_dispatch_s"] - 5e-6) < 1e-12, p["eager_dispatch_s"]
assert abs(p["pinned_copy_bandwidth"] / 20e9 - 1) < 1e-6, p["pinned_copy_bandwidth"]
assert abs(p["pageable_copy_bandwidth"] / 20e9 - 1) < 1e-6, p["pageable_copy_bandwidth"]
assert "fitted by fullshard calibrate" in p["sources"]["kernel_gap_s"]
# Fused norms (forward, and the backward's two kernels) ran at 0.4 of HBM bandwidth, the gaps off.
assert abs(p["norm_memory_efficiency"] - 0.4) < 1e-3, p["norm_memory_efficiency"]
assert "fitted by fullshard calibrate" in p["sources"]["norm_memory_efficiency"]
P
# The fitted profile drives a simulation.
printf '{"model": "tiny-llama", "training": {"seq_len": 64}, "hardware": {"profile": "h100-measured.json", "gpus_per_node": 2}}\n' > "$tmp/s.json"
"$bin" simulate "$tmp/s.json" > "$tmp/sim.out"
grep -q "nccl+roofline" "$tmp/sim.out"

# Bad input: one line naming the flag, exit 2.
expect2() {
  local what="$1"; shift
  set +e; python3 "$m" "$@" > "$tmp/bad.out" 2>&1; local rc=$?; set -e
  [ "$rc" -eq 2 ] || { echo "expected exit 2 for $what, got $rc"; cat "$tmp/bad.out"; exit 1; }
  grep -q -- "$what" "$tmp/bad.out" || { echo "no '$what' in:"; cat "$tmp/bad.out"; exit 1; }
  [ "$(wc -l < "$tmp/bad.out")" -le 2 ] || { echo "more than one error line:"; cat "$tmp/bad.out"; exit 1; }
}
expect2 "--models-json: is missing" --scenario "$src/scenarios/llama3.1-8b-fsdp8-h100.json" --list
expect2 "--scenario: file not found" --scenario "$tmp/nope.json" --list
expect2 "--n-kv-heads: is 3, which does not divide" --dim 64 --n-heads 4 --n-kv-heads 3 --seq 8 --list
expect2 "--seq: is missing" --dim 64 --n-heads 4 --list
expect2 "--efficiency" --dim 64 --n-heads 4 --seq 8 --dry-run --efficiency 2
expect2 "--output: cannot write" --dim 64 --n-heads 4 --seq 8 --dry-run -o "$tmp/no/such/dir/m.csv"
echo ok
