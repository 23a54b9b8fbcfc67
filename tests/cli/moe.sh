#!/usr/bin/env bash
# Mixture of experts from the command line (docs/moe.md): the shipped tiny MoE simulates; what
# is not built yet (training on the CUDA backend, tensor-parallel experts, an HF router field
# fullshard does not model) is one line on stderr naming the field, exit code 2.
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # expect NAME SUBSTRING -- ARGS...
  local name="$1" want="$2"; shift 3
  "$bin" "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  local lines; lines=$(wc -l < "$tmp/err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL $name: rc=$rc lines=$lines stderr:"; cat "$tmp/err"; fail=1
  else
    echo "ok   $name: $(cat "$tmp/err")"
  fi
}
sc="$src/scenarios/tiny-moe-fsdp2-h100.json"
if "$bin" simulate "$sc" --json "$tmp/r.json" > "$tmp/out" 2>&1; then
  python3 - "$tmp/r.json" <<'P' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
assert not r.get("problems"), r.get("problems")
assert r["step_time_s"] > 0
P
  echo "ok   simulate tiny-moe"
else
  echo "FAIL simulate tiny-moe:"; cat "$tmp/out"; fail=1
fi
# The CPU backend trains a MoE scenario (its kernels: backends/cpu/kernels/moe_*.cc); the CUDA
# backend no longer refuses model.moe (backends/cuda/kernels/moe_*.cu): without a GPU the one line
# names --backend, built without CUDA it names the backend.
cpu_sc="$src/scenarios/tiny-moe-cpu2.json"
if "$bin" train "$cpu_sc" --steps 2 > "$tmp/out" 2>&1 && grep -q "trained 2 steps" "$tmp/out"; then
  echo "ok   train tiny-moe-cpu2 on the CPU backend"
else
  echo "FAIL train tiny-moe-cpu2:"; cat "$tmp/out"; fail=1
fi
# Expert parallelism on the CPU backend (4 processes, Gloo all-to-all-v with the router's split
# sizes): tiny-moe-ep2-cpu4 trains tiny-moe-cpu2's global batch (16 sequences of 64) to the same
# losses, only summation order apart, and records its routing in --metrics.
cpu_ep="$src/scenarios/tiny-moe-ep2-cpu4.json"
if "$bin" train "$cpu_ep" --steps 6 --metrics "$tmp/ep.jsonl" --json "$tmp/ep-measured.json" \
     > "$tmp/out" 2>&1 \
   && "$bin" train "$cpu_sc" --steps 6 --metrics "$tmp/dense.jsonl" >> "$tmp/out" 2>&1 \
   && python3 - "$tmp/ep.jsonl" "$tmp/dense.jsonl" <<'P'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 6 and max(abs(x - y) for x, y in zip(a, b)) <= 1e-4, (a, b)
P
then
  echo "ok   train tiny-moe-ep2-cpu4 (ep 2, 4 processes) == tiny-moe-cpu2"
else
  echo "FAIL train tiny-moe-ep2-cpu4:"; cat "$tmp/out"; fail=1
fi
# Its measured report carries the routed tokens per timeline point (NOTE [Routed tokens in the
# timeline]): on every rank, the value at the measured peak is its moe_at_peak.routed_tokens.
if python3 - "$tmp/ep-measured.json" > "$tmp/out" 2>&1 <<'P'
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r["memory_timeline"]) == 4, len(r["memory_timeline"])
for tl in r["memory_timeline"]:
    c = r["rank_classes"][tl["class"]]
    a, rt = tl["allocated_bytes"], tl["routed_tokens_bytes"]
    peak = a.index(max(a))
    want = c["moe_at_peak"]["routed_tokens"]
    assert want > 0 and rt[peak] == want, (tl["ranks"], rt[peak], want)
    assert rt[-1] < max(rt), "routed tokens never given back"
P
then
  echo "ok   measured routed_tokens_bytes meets moe_at_peak at each rank's peak"
else
  echo "FAIL measured routed_tokens_bytes:"; cat "$tmp/out"; fail=1
fi
# The simulator replays that run's routing from its --metrics file (NOTE [Recorded routing]) and
# predicts its peak (routed receive buffers: ranks differ with the router) to the byte; a file
# with fewer steps than simulated, or of another mesh, is one line naming the field.
python3 - "$cpu_ep" "$tmp" <<'P'
import json, sys
j = json.load(open(sys.argv[1])); j.pop("$schema", None)
j["training"]["moe_routing"] = {"recorded": "ep.jsonl"}
for name, steps, shape in (("replay", 6, 4), ("replay-long", 7, 4), ("replay-mesh", 6, 2)):
    k = json.loads(json.dumps(j)); k["training"]["steps"] = steps
    k["fsdp"]["mesh"]["shape"] = [shape]; k["hardware"]["gpus_per_node"] = shape
    if shape == 2: k["expert_parallel"]["degree"] = 2
    json.dump(k, open(f"{sys.argv[2]}/{name}.json", "w"))
j["training"]["steps"] = 6
for name, change in (("replay-ac", {"activation_checkpointing": "full"}),
                     ("replay-empty", {"moe_routing": {}}),
                     ("replay-missing", {"moe_routing": {"recorded": "none.jsonl"}}),
                     ("replay-dense", {"moe_routing": {"recorded": "dense.jsonl"}}),
                     ("replay-ac-unlabelled", {"activation_checkpointing": "full",
                                               "moe_routing": {"recorded": "ep-old.jsonl"}})):
    k = json.loads(json.dumps(j)); k["training"].update(change)
    json.dump(k, open(f"{sys.argv[2]}/{name}.json", "w"))
P
if "$bin" simulate "$tmp/replay.json" --json "$tmp/replay-r.json" > "$tmp/out" 2>&1 \
   && python3 - "$tmp/replay-r.json" "$tmp/ep.jsonl" <<'P'
import json, sys
r = json.load(open(sys.argv[1]))
lines = [json.loads(l) for l in open(sys.argv[2])]
assert all(len(x["tokens_per_expert"]) == 2 for l in lines for x in l["ranks"]), lines[0]["ranks"]
peaks = [c["peak_allocated_bytes"] for c in r["rank_classes"]]
assert len(peaks) == 4 and len(set(peaks)) > 1, peaks  # every rank alone; the router moves them
assert max(peaks) == max(l["peak_allocated_bytes"] for l in lines), (peaks, lines[-1])
P
then
  echo "ok   simulate replays tiny-moe-ep2-cpu4's recorded routing to its measured peak"
else
  echo "FAIL simulate with the recorded routing:"; cat "$tmp/out"; fail=1
fi
expect ep-replay-too-short 'training.moe_routing.recorded: (' -- simulate "$tmp/replay-long.json"
expect ep-replay-other-mesh 'records 4 ranks, but the job has 2' -- simulate "$tmp/replay-mesh.json"
expect ep-replay-other-ac 'where this scenario calls them as grad_accum_steps 1; MoE layers recomputed: 0,1' -- simulate "$tmp/replay-ac.json"
# A record written before the lines carried moe_call_order: the calls per step still disagree.
python3 -c 'import json, sys
with open(sys.argv[2], "w") as out:
    for l in open(sys.argv[1]):
        j = json.loads(l); j.pop("moe_call_order"); out.write(json.dumps(j) + "\n")' "$tmp/ep.jsonl" "$tmp/ep-old.jsonl"
expect ep-replay-other-ac-unlabelled 'has 2 MoE layer calls, where this scenario makes 4 per step' -- simulate "$tmp/replay-ac-unlabelled.json"
expect ep-replay-empty 'training.moe_routing: is empty' -- simulate "$tmp/replay-empty.json"
expect ep-replay-missing 'none.jsonl' -- simulate "$tmp/replay-missing.json"
expect ep-replay-other-run 'records 2 ranks, but the job has 4' -- simulate "$tmp/replay-dense.json"
# The recording's expert load carries to another mesh (NOTE [Expert load]): tiny-moe-ep2-cpu4's
# 4-rank run's shares, mean and hottest call, on 2 ranks at ep 2 (each under the worst case; the
# mean's uneven load sets the two ep ranks apart), and ranking a plan's candidates.
python3 - "$cpu_ep" "$tmp" <<'P'
import json, sys
j = json.load(open(sys.argv[1])); j.pop("$schema", None)
j["fsdp"]["mesh"]["shape"] = [2]; j["hardware"]["gpus_per_node"] = 2; j["training"]["steps"] = 2
for name, routing in (("load-mean", {"expert_load": "ep.jsonl"}),
                      ("load-hottest", {"expert_load": "ep.jsonl", "statistic": "hottest"}),
                      ("load-bad", {"expert_load": "three.jsonl"})):
    k = json.loads(json.dumps(j)); k["training"]["moe_routing"] = routing
    json.dump(k, open(f"{sys.argv[2]}/{name}.json", "w"))
open(f"{sys.argv[2]}/three.jsonl", "w").write(
    json.dumps({"step": 0, "ranks": [{"rank": 0, "tokens_per_expert": [[1, 2, 3]]}]}) + "\n")
P
if "$bin" simulate "$tmp/load-mean.json" --json "$tmp/load-mean-r.json" > "$tmp/out" 2>&1 \
   && "$bin" simulate "$tmp/load-hottest.json" --json "$tmp/load-hottest-r.json" >> "$tmp/out" 2>&1 \
   && (cd "$tmp" && "$bin" plan --model tiny-moe --gpus 4 --gpus-per-node 4 --gpu h100-sxm-80gb \
         --seq-len 64 --micro-batches 8 --ep 2 --moe-routing '{"expert_load": "ep.jsonl"}' --top 1 \
         --write-scenario "$tmp/load-plan.json") >> "$tmp/out" 2>&1 \
   && python3 - "$tmp/load-mean-r.json" "$tmp/load-hottest-r.json" "$tmp/load-plan.json" <<'P'
import json, sys
mean, hot = (json.load(open(p)) for p in sys.argv[1:3])
worst = mean["worst_routing"]["peak_allocated_bytes"]
for r in (mean, hot):
    assert r["ok"], r["problems"]
    assert max(c["peak_allocated_bytes"] for c in r["rank_classes"]) <= worst
# The recorded load is uneven: the two ep ranks (experts 0-1, 2-3) peak apart.
assert len({c["peak_allocated_bytes"] for c in mean["rank_classes"]}) == 2, mean["rank_classes"]
assert json.load(open(sys.argv[3]))["training"]["moe_routing"] == {"expert_load": "ep.jsonl"}
P
then
  echo "ok   expert_load of a 4-rank recording simulates 2 ranks apart, under the worst case, and plans"
else
  echo "FAIL expert_load:"; cat "$tmp/out"; fail=1
fi
expect ep-load-other-model 'training.moe_routing.expert_load: ' -- simulate "$tmp/load-bad.json"
# Max receive buffers hold the most a rank can receive: predicted before the run, to the byte.
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); j['expert_parallel']['receive_buffers']='max'; j.pop('\$schema'); json.dump(j, open(sys.argv[2], 'w'))" "$cpu_ep" "$tmp/max.json"
if "$bin" compare "$tmp/max.json" --steps 2 > "$tmp/out" 2>&1 && grep -q "ok: predicted peaks equal" "$tmp/out" \
   && ! grep -q "replaying" "$tmp/out"; then
  echo "ok   compare tiny-moe-ep2-cpu4 with max receive buffers"
else
  echo "FAIL compare with max receive buffers:"; cat "$tmp/out"; fail=1
fi
# Checkpoints of the ep run (NOTE [Pieces of expert-parallel weights]): saving every 2 steps
# changes no loss, a resume on the same mesh continues bit for bit, and the ep 2 checkpoint
# resumed on tiny-moe-cpu2 (ep 1, 2 ranks) continues as the dense run does.
if "$bin" train "$cpu_ep" --steps 4 --checkpoint-every 2 --checkpoint-dir "$tmp/ck" \
     --metrics "$tmp/ck.jsonl" > "$tmp/out" 2>&1 \
   && "$bin" checkpoint inspect "$tmp/ck/step-00000002" > "$tmp/inspect" 2>&1 \
   && grep -qF "mesh replicate 1 x shard 4 (efsdp 2 x ep 2)" "$tmp/inspect" \
   && "$bin" train "$cpu_ep" --steps 4 --resume "$tmp/ck/step-00000002" \
     --metrics "$tmp/resume-ep.jsonl" >> "$tmp/out" 2>&1 \
   && "$bin" train "$cpu_sc" --steps 4 --resume "$tmp/ck/step-00000002" \
     --metrics "$tmp/resume-dense.jsonl" >> "$tmp/out" 2>&1 \
   && python3 - "$tmp" <<'P'
import json, sys
def losses(name):
    return {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[1] + "/" + name))}
ep, dense, saved = losses("ep.jsonl"), losses("dense.jsonl"), losses("ck.jsonl")
r_ep, r_dense = losses("resume-ep.jsonl"), losses("resume-dense.jsonl")
assert [saved[k] for k in range(4)] == [ep[k] for k in range(4)], (saved, ep)
assert sorted(r_ep) == sorted(r_dense) == [2, 3], (r_ep, r_dense)
assert all(r_ep[k] == ep[k] for k in (2, 3)), (r_ep, ep)
assert all(abs(r_dense[k] - dense[k]) <= 1e-4 for k in (2, 3)), (r_dense, dense)
print(f"step 2 loss: ep 2 -> ep 2 resume {r_ep[2]:.6f}, ep 2 -> ep 1 resume {r_dense[2]:.6f}, "
      f"uninterrupted ep 1 {dense[2]:.6f}")
P
then
  echo "ok   tiny-moe-ep2-cpu4 checkpoints: resumed on ep 2 bit for bit, on tiny-moe-cpu2 as dense"
else
  echo "FAIL tiny-moe-ep2-cpu4 checkpoints:"; cat "$tmp/out" "$tmp/inspect"; fail=1
fi
# A resumed run's metrics start at its resume step: not a routing the simulator can replay.
sed 's/"ep.jsonl"/"resume-ep.jsonl"/; s/"steps": 6/"steps": 2/' "$tmp/replay.json" > "$tmp/replay-resumed.json"
expect ep-replay-resumed 'is step 2 where step 0 comes next' -- simulate "$tmp/replay-resumed.json"
"$bin" train "$sc" --steps 1 --backend cuda > "$tmp/out" 2> "$tmp/err"; rc=$?
if [ "$rc" -eq 0 ] || { [ "$rc" -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] &&
   grep -Eq "has no GPU|built without the CUDA backend" "$tmp/err" && ! grep -q "model.moe" "$tmp/err"; }; then
  echo "ok   train on the CUDA backend: rc=$rc $(cat "$tmp/err")"
else
  echo "FAIL train on the CUDA backend: rc=$rc stderr:"; cat "$tmp/err"; fail=1
fi
# Expert parallelism (docs/moe.md): the shipped ep 2 scenario simulates with its all-to-alls and
# a class per ep load under its skew; an ep that does not divide the experts is one line.
ep="$src/scenarios/tiny-moe-ep2-h100.json"
if "$bin" simulate "$ep" --json "$tmp/ep.json" > "$tmp/out" 2>&1; then
  python3 - "$tmp/ep.json" <<'P' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
assert not r.get("problems"), r.get("problems")
classes = r["rank_classes"]
assert len(classes) == 2, classes
assert all(c["collectives_last_step"].get("all_to_all", 0) == 10 for c in classes), classes
# The worst-case routing's peak beside it (NOTE [Worst-case routing]): at least the assumed one's.
w = r["worst_routing"]
assert w["hot_expert_factor"] == 4 and not w["out_of_memory"], w
assert w["peak_reserved_bytes"] >= max(c["peak_reserved_bytes"] for c in classes), w
P
  echo "ok   simulate tiny-moe-ep2"
else
  echo "FAIL simulate tiny-moe-ep2:"; cat "$tmp/out"; fail=1
fi
python3 - "$ep" "$tmp/ep3.json" <<'P'
import json, sys
j = json.load(open(sys.argv[1])); j["expert_parallel"]["degree"] = 3; j["fsdp"]["mesh"]["shape"] = [3]
j["hardware"]["gpus_per_node"] = 3; j.pop("$schema")
json.dump(j, open(sys.argv[2], "w"))
P
expect ep-not-dividing "expert_parallel.degree" -- simulate "$tmp/ep3.json"
cat > "$tmp/qwen3.json" <<'J'
{"model": "qwen3-30b-a3b", "training": {"seq_len": 256, "activation_checkpointing": "full"}, "hardware": {"profile": "h100-sxm-80gb", "nodes": 4, "gpus_per_node": 8}, "fsdp": {"mesh": {"shape": [32]}}}
J
if "$bin" simulate "$tmp/qwen3.json" > "$tmp/out" 2>&1; then echo "ok   simulate qwen3-30b-a3b";
else echo "FAIL simulate qwen3-30b-a3b:"; cat "$tmp/out"; fail=1; fi
sed 's/"shape": \[32\]/"shape": [16, 2], "dim_names": ["dp_shard", "tp"]/' "$tmp/qwen3.json" > "$tmp/qwen3-tp.json"
expect qwen3-tp "fsdp.mesh" -- simulate "$tmp/qwen3-tp.json"
python3 - "$src/tests/data/hf/mixtral-8x7b.json" "$tmp/jitter/config.json" <<'P'
import json, os, sys
c = json.load(open(sys.argv[1])); c["router_jitter_noise"] = 0.01
os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True); json.dump(c, open(sys.argv[2], "w"))
P
cat > "$tmp/jitter.json" <<J
{"model": {"hf_config": "$tmp/jitter/config.json"}, "training": {"seq_len": 8}, "hardware": {"profile": "h100-sxm-80gb", "gpus_per_node": 8}, "fsdp": {"mesh": {"shape": [8]}}}
J
expect hf-jitter "router_jitter_noise" -- simulate "$tmp/jitter.json"
exit $fail
