#!/usr/bin/env bash
# FSDPModule.unshard(async_op) and register_fsdp_forward_method from the scenario (NOTE [Async
# unshard] in core/fsdp/fsdp_param_group.cc, NOTE [Forward methods] in core/fsdp/fully_shard.cc):
# on tiny-llama-cpu2, fsdp.unshard (sync and async) and training.generate_every with
# fsdp.forward_methods keep predicted == measured to the byte on both ranks; the unshard leaves
# the losses bit-identical to the run without it; a generate pass without the registration is
# refused with a one-line error naming the fix (exit 2); fullshard plan --finetune lora / qlora.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
base="$src/scenarios/tiny-llama-cpu2.json"

python3 - "$base" "$tmp" <<'P'
import json, sys
base = json.load(open(sys.argv[1]))
out = sys.argv[2]
def write(name, fsdp=None, training=None):
    s = json.loads(json.dumps(base))
    s["fsdp"].update(fsdp or {})
    s["training"].update(training or {})
    json.dump(s, open(f"{out}/{name}.json", "w"))
write("plain")
write("unshard_sync", {"unshard": {"modules": ["root", "layers.0"]}})
write("unshard_async", {"unshard": {"modules": ["root", "layers.-1"], "async_op": True}})
write("generate", {"forward_methods": ["generate"]}, {"generate_every": 1})
write("generate_unregistered", None, {"generate_every": 1})
write("bad_async", {"unshard": {"modules": ["root"], "async_op": "yes"}})
for n in (0, 1, 4):  # 12 steps; a generate pass after every n-th (0: none)
    write(f"gen12_{n}", {"forward_methods": ["generate"]},
          {"steps": 12, **({"generate_every": n} if n else {})})
P

# The simulator prices every generate pass: 12 passes cost 4x what 3 cost, and with passes every
# 4 steps (steps differ) it plays all 12 steps instead of extrapolating a steady state.
for n in 0 1 4; do
  "$bin" simulate "$tmp/gen12_$n.json" --json "$tmp/gen12_$n.sim.json" > /dev/null 2>&1 \
    || { "$bin" simulate "$tmp/gen12_$n.json"; exit 1; }
done
python3 - "$tmp" <<'P'
import json, sys
r = {n: json.load(open(f"{sys.argv[1]}/gen12_{n}.sim.json")) for n in (0, 1, 4)}
t = {n: r[n]["total_time_s"] for n in r}
assert r[4]["simulated_steps"] == 12 and r[4]["extrapolated_steps"] == 0, r[4]["simulated_steps"]
assert t[0] < t[4] < t[1], t
ratio = (t[1] - t[0]) / (t[4] - t[0])
assert abs(ratio - 4) < 0.4, (ratio, t)
P
echo "ok generate priced"

for v in unshard_sync unshard_async generate; do
  "$bin" compare "$tmp/$v.json" --steps 2 --json "$tmp/$v.cmp.json" > "$tmp/$v.out" 2>&1 \
    || { echo "compare failed for $v"; cat "$tmp/$v.out"; exit 1; }
  python3 - "$tmp/$v.cmp.json" <<'P'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["equal"] is True and len(c["ranks"]) == 2
for r in c["ranks"]:
    assert r["predicted_peak_allocated_bytes"] == r["measured_peak_allocated_bytes"], r
    assert r["predicted_peak_reserved_bytes"] == r["measured_peak_reserved_bytes"], r
P
  echo "ok compare $v"
done

# An explicit unshard changes where the all-gathers run, not what they compute.
for v in plain unshard_async; do
  "$bin" train "$tmp/$v.json" --steps 5 --metrics "$tmp/$v.jsonl" > "$tmp/$v.train.out" 2>&1 \
    || { cat "$tmp/$v.train.out"; exit 1; }
done
python3 - "$tmp/plain.jsonl" "$tmp/unshard_async.jsonl" <<'P'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == 5 and a == b, list(zip(a, b))
P
echo "ok losses"

for v in generate_unregistered bad_async; do
  set +e
  "$bin" simulate "$tmp/$v.json" > "$tmp/$v.out" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "$v: exit $rc, expected 2"; cat "$tmp/$v.out"; exit 1; }
  [ "$(wc -l < "$tmp/$v.out")" -eq 1 ] || { echo "$v: not one line"; cat "$tmp/$v.out"; exit 1; }
done
grep -q "training.generate_every" "$tmp/generate_unregistered.out"
grep -q "forward_methods" "$tmp/generate_unregistered.out"
grep -q "fsdp.unshard.async_op" "$tmp/bad_async.out"
echo "ok errors"

# fullshard plan --finetune (NOTE [Fine-tuning presets] in tools/fullshard/plan_commands.cc):
# torchtune's LoRA preset on tiny-llama over 2 CPU ranks recommends a scenario with the adapters
# and bf16 parameters, which compares equal on the CPU backend; the QLoRA preset on Llama 3.1 8B keeps
# the NF4 base; a bad value or a model the preset does not fit is one line naming --finetune.
"$bin" plan --model tiny-llama --gpus 2 --gpu cpu --seq-len 64 --finetune lora --top 1 \
  --write-scenario "$tmp/lora.json" > "$tmp/plan_lora.out" 2>&1 || { cat "$tmp/plan_lora.out"; exit 1; }
"$bin" compare "$tmp/lora.json" --steps 2 --json "$tmp/lora.cmp.json" > "$tmp/lora.out" 2>&1 \
  || { cat "$tmp/lora.out"; exit 1; }
"$bin" plan --model llama3.1-8b --gpus 8 --gpu h100 --seq-len 8192 --finetune qlora --top 1 \
  --micro-batches 1 --write-scenario "$tmp/qlora.json" > "$tmp/plan_qlora.out" 2>&1 \
  || { cat "$tmp/plan_qlora.out"; exit 1; }
python3 - "$tmp/lora.json" "$tmp/lora.cmp.json" "$tmp/qlora.json" <<'P'
import json, sys
lora, cmp, qlora = (json.load(open(p)) for p in sys.argv[1:])
assert lora["model"]["lora"] == {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}
assert lora["training"]["orig_dtype"] == "bf16"  # torchtune's dtype: bf16, no policy
assert cmp["equal"] is True
for r in cmp["ranks"]:
    assert r["predicted_peak_allocated_bytes"] == r["measured_peak_allocated_bytes"], r
assert qlora["model"]["lora"]["rank"] == 16 and len(qlora["model"]["lora"]["target_modules"]) == 7
assert qlora["training"]["frozen_dtype"] == "nf4"
P
echo "ok plan presets"
for bad in "--model tiny-llama --finetune dora" "--model gpt2-124m --finetune lora" \
           "--scenario $src/scenarios/tiny-llama-lora-cpu2.json --finetune lora"; do
  set +e
  # shellcheck disable=SC2086
  "$bin" plan $bad --gpus 2 --gpu cpu --seq-len 64 > "$tmp/bad.out" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 2 ] && [ "$(wc -l < "$tmp/bad.out")" -eq 1 ] && grep -q -- "--finetune" "$tmp/bad.out" \
    || { echo "plan $bad: exit $rc"; cat "$tmp/bad.out"; exit 1; }
done
echo "ok plan preset errors"
