#!/usr/bin/env bash
# tools/measure/measure.py's torch path on the CPU (--device cpu, tiny shapes): the plan timed
# with PyTorch, written as calibrate's CSV, fitted by `fullshard calibrate`, and the fitted
# profile simulated. Skips (77) where the Python ($FULLSHARD_TORCH_PYTHON, default python3) has
# no torch, as on CI; the GPU run is tools/gpu-check.sh's measure step.
set -eu
bin="$1"; src="$2"
py="${FULLSHARD_TORCH_PYTHON:-python3}"
"$py" -c "import torch" 2> /dev/null || { echo "no torch in $py: skipped"; exit 77; }
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
"$py" "$src/tools/measure/measure.py" --device cpu --dim 64 --n-heads 4 --n-kv-heads 2 --ffn-dim 128 \
  --vocab-size 256 --seq 64 --batch 2 --dtype fp32 --warmup 1 --iters 3 -o "$tmp/measured.csv" > "$tmp/measure.out"
grep -q "^# torch: " "$tmp/measured.csv"
grep -q "^# device: cpu" "$tmp/measured.csv"
grep -q "^# chain rmsnorm_eager: " "$tmp/measured.csv"
# Every planned kernel row was timed: 15 GEMMs, 2 attention, 11 fp32 elementwise (no casts), the
# fused norm forward and backward.
[ "$(grep -c ',matmul,' "$tmp/measured.csv")" -eq 15 ]
[ "$(grep -c ',attention' "$tmp/measured.csv")" -eq 2 ]
[ "$(grep -c ',vector,' "$tmp/measured.csv")" -eq 11 ]
[ "$(grep -c ',norm' "$tmp/measured.csv")" -eq 2 ]
"$bin" calibrate "$tmp/measured.csv" --hardware cpu -o "$tmp/cpu-measured.json" > "$tmp/cal.out"
grep -q "0 collective and 30 kernel samples" "$tmp/cal.out"
grep -q "norm_memory_efficiency" "$tmp/cal.out"
grep -q "matmul_efficiency" "$tmp/cal.out"
printf '{"model": "tiny-llama", "training": {"seq_len": 64}, "hardware": {"profile": "cpu-measured.json"}}\n' > "$tmp/s.json"
"$bin" simulate "$tmp/s.json" | grep -q "nccl+roofline"
echo ok
