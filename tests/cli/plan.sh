#!/usr/bin/env bash
# fullshard plan: bad input (one line naming the flag, the value and the fix; exit 2), the
# ranked table, OUT.json's schema and rank order, and --write-scenario's round trip through
# `fullshard simulate` (same peak and step time) and `fullshard train`.
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # expect NAME SUBSTRING... -- ARGS...
  local name="$1"; shift
  local wants=()
  while [ "$1" != "--" ]; do wants+=("$1"); shift; done
  shift
  "$bin" "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  local lines; lines=$(wc -l < "$tmp/err")
  local ok=1
  [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] || ok=0
  for w in "${wants[@]}"; do grep -qF -- "$w" "$tmp/err" || ok=0; done
  if [ $ok -eq 0 ]; then
    echo "FAIL $name: rc=$rc lines=$lines stderr:"; cat "$tmp/err"; fail=1
  else
    echo "ok   $name: $(cat "$tmp/err")"
  fi
}
common=(--gpus 8 --gpus-per-node 8 --gpu h100-sxm-80gb --seq-len 64)
expect unknown-model "--model" "llama9-1t" "known models" -- plan --model llama9-1t "${common[@]}"
expect unknown-gpu "--gpu" "h1000" "h100-sxm-80gb" -- plan --model tiny-llama --gpus 8 --gpu h1000 --seq-len 64
expect gpus-per-node "--gpus" "12" "--gpus-per-node 8" "--gpus 8 or 16" -- plan --model tiny-llama --gpus 12 --gpus-per-node 8 --gpu h100 --seq-len 64
expect global-batch "--global-batch" "12" "multiple of --gpus 8" -- plan --model tiny-llama "${common[@]}" --global-batch 12
expect no-model "--model" "no model given" -- plan "${common[@]}"
expect two-models "several model sources" -- plan --model tiny-llama --hf-config x.json "${common[@]}"
expect no-seq-len "--seq-len" "is missing" -- plan --model tiny-llama --gpus 8 --gpu h100
expect no-gpus "--gpus" "is missing" -- plan --model tiny-llama --gpu h100 --seq-len 64
expect headroom "--headroom" "1.5" -- plan --model tiny-llama "${common[@]}" --headroom 1.5
expect micro-batch-twice "--micro-batches" "has 1 twice" -- plan --model tiny-llama "${common[@]}" --micro-batches 1 2 1
expect tp-twice "--tp" "has 2 twice" -- plan --model tiny-llama "${common[@]}" --tp 2 2
expect ep-dense "--ep" "has no experts" -- plan --model tiny-llama "${common[@]}" --ep 2
expect ep-divide "--ep" "has 3" "4 experts" -- plan --model tiny-moe "${common[@]}" --ep 1 3
expect ep-twice "--ep" "has 2 twice" -- plan --model tiny-moe "${common[@]}" --ep 2 2
expect pp-batch "--pp" "without --global-batch" -- plan --model tiny-llama "${common[@]}" --pp 2
expect pp-divide "--pp" "has 3" -- plan --model tiny-llama "${common[@]}" --global-batch 16 --pp 3
expect pp-gpt2 "--pp" "cannot use" "GPT-2" -- plan --model tiny-gpt2 "${common[@]}" --global-batch 16 --pp 2
expect pp-schedule-alone "--pp-schedule" "without --pp" -- plan --model tiny-llama "${common[@]}" --pp-schedule 1F1B
expect moe-routing "--moe-routing" "wrost" -- plan --model tiny-moe "${common[@]}" --moe-routing wrost
expect hf-config "--hf-config" "no-such" -- plan --hf-config "$tmp/no-such/config.json" "${common[@]}"
expect json-ext "--json" "out.txt" ".json" -- plan --model tiny-llama "${common[@]}" --json "$tmp/out.txt"
printf '{"model": "tiny-llama", "training": {"seq_len": 32, "rank_batch": [{"rank": 1, "batch": 2}]}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}' > "$tmp/uneven.json"
expect uneven "--scenario" "rank_batch" -- plan --scenario "$tmp/uneven.json"
expect gpt2-seq "--seq-len" "4096" -- plan --model tiny-gpt2 --gpus 8 --gpu h100 --seq-len 4096

# A small plan: the table, OUT.json and the written scenario.
"$bin" plan --model tiny-llama --gpus 4 --gpus-per-node 2 --gpu h100-sxm-80gb --seq-len 32 --global-batch 8 \
  --json "$tmp/plan.json" --write-scenario "$tmp/best.json" --top 5 > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ $rc -ne 0 ] || ! grep -q "^recommended: " "$tmp/out" || ! grep -q "^rejected:" "$tmp/out" \
   || ! grep -q "^evaluated [0-9]* configurations" "$tmp/out"; then
  echo "FAIL plan: rc=$rc"; cat "$tmp/out" "$tmp/err"; fail=1
else
  echo "ok   plan: $(grep '^evaluated' "$tmp/out")"
fi
"$bin" simulate "$tmp/best.json" --json "$tmp/report.json" > "$tmp/sim.out" 2>&1 || { echo "FAIL simulate best.json"; cat "$tmp/sim.out"; fail=1; }
python3 - "$tmp/plan.json" "$tmp/report.json" <<'P' || fail=1
import json, sys
plan = json.load(open(sys.argv[1])); rep = json.load(open(sys.argv[2]))
cfgs = plan["configs"]
assert plan["evaluated"] == len(cfgs) > 0, "evaluated"
for key in ["model", "gpus", "gpus_per_node", "gpu", "seq_len", "global_batch", "headroom", "capacity_bytes",
            "usable_bytes", "evaluated", "simulated", "recommended", "families", "configs"]:
    assert key in plan, key
need = ["rank", "fits", "peak_reserved_bytes", "step_time_s", "tokens_per_s_per_gpu", "mfu", "mesh",
        "reshard_after_forward", "precision", "param_dtype", "reduce_dtype", "cpu_offload",
        "activation_checkpointing", "micro_batch", "grad_accum_steps", "expandable_segments", "verdict"]
for i, c in enumerate(cfgs):
    for key in need: assert key in c, (i, key)
    assert c["rank"] == i + 1
# Fitting configurations first, by tokens/s per GPU.
fits = [c for c in cfgs if c["fits"] is True]
assert all(c["fits"] is not None or c["verdict"] == "time_bound" for c in cfgs)
assert cfgs[:len(fits)] == fits, "fitting configurations are not first"
tps = [c["tokens_per_s_per_gpu"] for c in fits]
assert tps == sorted(tps, reverse=True), "not ranked by tokens/s"
for c in fits:
    assert c["verdict"] == "simulated" and c["step_time_s"] > 0 and 0 < c["mfu"] < 1
best = cfgs[0]
assert plan["recommended"]["mesh"] == best["mesh"]
assert plan["recommended"]["micro_batch"] * plan["recommended"]["grad_accum_steps"] * plan["gpus"] == plan["global_batch"]
# The written scenario simulates to the planner's figures.
peak = max(c["peak_reserved_bytes"] for c in rep["rank_classes"])
assert peak == best["peak_reserved_bytes"], (peak, best["peak_reserved_bytes"])
assert rep["step_time_s"] == best["step_time_s"], (rep["step_time_s"], best["step_time_s"])
print("ok   plan.json: %d configs, %d fit; best.json simulates to %d bytes, %.6f s" % (len(cfgs), len(fits), peak, rep["step_time_s"]))
P

# The recommendation trains for real (CPU profile: 2 ranks over Gloo).
"$bin" plan --model tiny-llama --gpus 2 --gpu cpu --seq-len 32 --global-batch 2 --write-scenario "$tmp/cpu.json" \
  > "$tmp/cpu.out" 2>&1 || { echo "FAIL plan cpu"; cat "$tmp/cpu.out"; fail=1; }
if "$bin" train "$tmp/cpu.json" --steps 2 --timeout 30 > "$tmp/train.out" 2>&1; then
  echo "ok   train best: $(grep '^trained' "$tmp/train.out")"
else
  echo "FAIL train best"; cat "$tmp/train.out"; fail=1
fi

# A mixture-of-experts model: ep is searched, and the written scenario simulates to the
# recommendation's figures with its expert_parallel degree.
if "$bin" plan --model mixtral-8x7b --gpus 16 --gpu h100-sxm-80gb --seq-len 4096 --micro-batches 1 --tp 1 \
     --top 1 --json "$tmp/moe.json" --write-scenario "$tmp/moe-best.json" > "$tmp/moe.out" 2>&1 \
   && "$bin" simulate "$tmp/moe-best.json" --json "$tmp/moe-rep.json" > /dev/null 2>&1 \
   && python3 - "$tmp/moe.json" "$tmp/moe-rep.json" "$tmp/moe-best.json" <<'P'
import json, sys
plan = json.load(open(sys.argv[1])); rep = json.load(open(sys.argv[2])); scen = json.load(open(sys.argv[3]))
best = plan["configs"][0]
eps = {c["ep"] for c in plan["configs"]}
assert eps == {1, 2, 4, 8}, eps
assert best["fits"] and best["ep"] > 1, best  # Mixtral fits 16 H100s only with experts split
assert scen["expert_parallel"]["degree"] == best["ep"]
peak = max(c["peak_reserved_bytes"] for c in rep["rank_classes"])
assert peak == best["peak_reserved_bytes"] and rep["step_time_s"] == best["step_time_s"]
print("ok   plan mixtral-8x7b: EP %d, %d bytes, %.6f s" % (best["ep"], peak, rep["step_time_s"]))
P
then :; else echo "FAIL plan mixtral ep"; cat "$tmp/moe.out"; fail=1; fi

# Pipeline parallelism as a knob: the recommendation (a pp candidate here, as the test asks the
# planner to compare only pipelines) is written with its pipeline_parallel section and simulates to
# the same figures.
if "$bin" plan --model tiny-llama --gpus 4 --gpus-per-node 4 --gpu h100-sxm-80gb --seq-len 32 --global-batch 8 \
     --pp 2 4 --tp 1 --top 1 --json "$tmp/pp.json" --write-scenario "$tmp/pp-best.json" > "$tmp/pp.out" 2>&1 \
   && "$bin" simulate "$tmp/pp-best.json" --json "$tmp/pp-rep.json" > /dev/null 2>&1 \
   && python3 - "$tmp/pp.json" "$tmp/pp-rep.json" "$tmp/pp-best.json" <<'P'
import json, sys
plan = json.load(open(sys.argv[1])); rep = json.load(open(sys.argv[2])); scen = json.load(open(sys.argv[3]))
best = plan["configs"][0]
assert {c["pp"] for c in plan["configs"]} == {2, 4}
assert best["fits"] and best["pp"] in (2, 4), best
assert scen["fsdp"]["mesh"]["dim_names"][0] == "pp" and scen["fsdp"]["mesh"]["shape"][0] == best["pp"]
assert scen["pipeline_parallel"]["schedule"] == best["pipeline_schedule"]
peak = max(c["peak_reserved_bytes"] for c in rep["rank_classes"])
assert peak == best["peak_reserved_bytes"] and rep["step_time_s"] == best["step_time_s"]
print("ok   plan --pp: PP %d %s, %d microbatches, %d bytes, %.6f s" % (best["pp"], best["pipeline_schedule"], best["pipeline_microbatches"], peak, rep["step_time_s"]))
P
then :; else echo "FAIL plan pp"; cat "$tmp/pp.out"; fail=1; fi

# Ranked by the worst-case routing: the written scenario keeps it, and simulate plays nothing more.
if "$bin" plan --model tiny-moe --gpus 4 --gpus-per-node 4 --gpu h100-sxm-80gb --seq-len 64 --micro-batches 8 \
     --ep 2 --moe-routing worst --top 1 --write-scenario "$tmp/worst.json" > "$tmp/worst.out" 2>&1 \
   && grep -q '"moe_routing": "worst"' "$tmp/worst.json" \
   && "$bin" simulate "$tmp/worst.json" > "$tmp/worst-sim.out" 2>&1 \
   && ! grep -q "worst-case routing" "$tmp/worst-sim.out"; then
  echo "ok   plan --moe-routing worst"
else
  echo "FAIL plan --moe-routing worst"; cat "$tmp/worst.out" "$tmp/worst-sim.out"; fail=1
fi

# A Hugging Face config as the model.
if "$bin" plan --hf-config "$src/tests/data/hf/qwen2.5-7b.json" --gpus 8 --gpu h100 --seq-len 128 --global-batch 8 \
     --top 1 > "$tmp/hf.out" 2>&1 && grep -q "^plan: qwen2 (7.62 B parameters)" "$tmp/hf.out"; then
  echo "ok   plan --hf-config"
else
  echo "FAIL plan --hf-config"; cat "$tmp/hf.out"; fail=1
fi

# A scenario as the starting point (its model, profile and world).
if "$bin" plan --scenario "$src/scenarios/tiny-llama-cpu2.json" --top 2 > "$tmp/scen.out" 2>&1 \
   && grep -q "on 2 x cpu" "$tmp/scen.out"; then
  echo "ok   plan --scenario"
else
  echo "FAIL plan --scenario"; cat "$tmp/scen.out"; fail=1
fi

# A LoRA scenario (its base frozen in bf16): only candidates that compute in bf16 without tp are
# planned (NOTE [What frozen parameters compose with]); the best one keeps the adapters and
# simulates.
if "$bin" plan --scenario "$src/scenarios/tiny-llama-lora-cpu2.json" --top 2 \
     --write-scenario "$tmp/lora-best.json" > "$tmp/lora.out" 2>&1 \
   && python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['model']['lora']['rank']==8; assert j['fsdp']['mixed_precision']['param_dtype']=='bf16'" "$tmp/lora-best.json" \
   && "$bin" simulate "$tmp/lora-best.json" > "$tmp/lora-sim.out" 2>&1 \
   && grep -q "in LoRA adapters" "$tmp/lora-sim.out"; then
  echo "ok   plan --scenario (LoRA)"
else
  echo "FAIL plan --scenario (LoRA)"; cat "$tmp/lora.out" "$tmp/lora-sim.out" 2>/dev/null; fail=1
fi
exit $fail
