#!/usr/bin/env bash
# Mixture of experts inside pipeline stages from the command line (NOTE [MoE in pipeline stages]
# in core/train/pipeline_program.cc): tiny-moe-pp2-cpu4 (pp 2 x FSDP 2, ep 2 inside each stage)
# trains on 4 processes, its loss falls, its --metrics file records each rank's routing per stage
# and microbatch, and the simulator replays it to the run's peak; a recording of another
# pipeline or checkpointing is one line naming training.moe_routing.recorded, exit code 2.
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
sc="$src/scenarios/tiny-moe-pp2-cpu4.json"
# tiny-moe-cpu2 trains the same 16 sequences a step on 2 ranks without pp or ep: the same
# losses, only summation order apart.
if "$bin" train "$sc" --steps 12 --metrics "$tmp/pp.jsonl" > "$tmp/out" 2>&1 \
   && "$bin" train "$src/scenarios/tiny-moe-cpu2.json" --steps 6 --metrics "$tmp/dense.jsonl" \
        >> "$tmp/out" 2>&1 \
   && python3 - "$tmp/pp.jsonl" "$tmp/dense.jsonl" <<'P'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 12
loss = [l["loss"] for l in lines]
assert loss[-1] < loss[0] - 0.5, loss  # it trains
dense = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert max(abs(x - y) for x, y in zip(loss, dense)) <= 1e-4, (loss, dense)
for l in lines:  # one MoE layer per pp rank, 4 microbatches: 4 histograms of 4 experts each
    assert len(l["ranks"]) == 4, l["ranks"]
    for r in l["ranks"]:
        h = r["tokens_per_expert"]
        assert len(h) == 4 and all(len(x) == 4 for x in h), r
        assert all(sum(x) == 2 * 64 * 2 for x in h), r  # 2 sequences of 64 tokens, top-2
P
then
  echo "ok   train tiny-moe-pp2-cpu4 (pp 2 x ep 2, 4 processes) == tiny-moe-cpu2, routing per microbatch"
else
  echo "FAIL train tiny-moe-pp2-cpu4:"; cat "$tmp/out"; fail=1
fi
python3 - "$sc" "$tmp" <<'P'
import json, sys
j = json.load(open(sys.argv[1])); j.pop("$schema", None)
j["training"]["moe_routing"] = {"recorded": "pp.jsonl"}
j["training"]["steps"] = 12
json.dump(j, open(f"{sys.argv[2]}/replay.json", "w"))
k = json.loads(json.dumps(j)); k["training"]["activation_checkpointing"] = "full"
json.dump(k, open(f"{sys.argv[2]}/replay-ac.json", "w"))
k = json.loads(json.dumps(j)); k["pipeline_parallel"]["microbatch_size"] = 4
json.dump(k, open(f"{sys.argv[2]}/replay-mb.json", "w"))
# GPipe with full AC makes as many calls a step as 1F1B with it, in another order (the last
# stage: F0 F1 F2 F3 R0 ... against F0 R0 F1 R1 ...).
k = json.loads(json.dumps(j)); k["training"]["activation_checkpointing"] = "full"
k["training"].pop("moe_routing"); json.dump(k, open(f"{sys.argv[2]}/train-ac.json", "w"))
k["training"]["moe_routing"] = {"recorded": "pp-ac.jsonl"}; k["training"]["steps"] = 2
json.dump(k, open(f"{sys.argv[2]}/record-ac.json", "w"))
k["pipeline_parallel"]["schedule"] = "GPipe"
json.dump(k, open(f"{sys.argv[2]}/replay-gpipe.json", "w"))
P
if "$bin" simulate "$tmp/replay.json" --json "$tmp/replay-r.json" > "$tmp/out" 2>&1 \
   && python3 - "$tmp/replay-r.json" "$tmp/pp.jsonl" <<'P'
import json, sys
r = json.load(open(sys.argv[1]))
lines = [json.loads(l) for l in open(sys.argv[2])]
assert not r.get("problems"), r["problems"]
peaks = [c["peak_allocated_bytes"] for c in r["rank_classes"]]
assert len(peaks) == 4, peaks  # every rank alone
assert max(peaks) == max(l["peak_allocated_bytes"] for l in lines), (peaks, lines[-1])
P
then
  echo "ok   simulate replays tiny-moe-pp2-cpu4's recorded routing to its measured peak"
else
  echo "FAIL simulate with the recorded pipeline routing:"; cat "$tmp/out"; fail=1
fi
expect pp-replay-other-ac 'where this scenario calls them as pipeline 1F1B, 4 microbatches, stages of layers 0-0 1-1; MoE layers recomputed: 0,1' -- simulate "$tmp/replay-ac.json"
expect pp-replay-other-microbatches 'where this scenario calls them as pipeline 1F1B, 2 microbatches' -- simulate "$tmp/replay-mb.json"
# A 1F1B run with full AC recorded, replayed by itself and refused by GPipe.
if "$bin" train "$tmp/train-ac.json" --steps 2 --metrics "$tmp/pp-ac.jsonl" > "$tmp/out" 2>&1 \
   && "$bin" simulate "$tmp/record-ac.json" > "$tmp/out" 2>&1; then
  echo "ok   a 1F1B run with full AC replays onto its own scenario"
else
  echo "FAIL record and replay 1F1B with full AC:"; cat "$tmp/out"; fail=1
fi
expect pp-replay-other-schedule 'where this scenario calls them as pipeline GPipe, 4 microbatches' -- simulate "$tmp/replay-gpipe.json"
exit $fail
