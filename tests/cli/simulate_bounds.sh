#!/usr/bin/env bash
# Issue 13 item 3: `fullshard simulate` cost is bounded. Huge step counts finish quickly and
# say they were extrapolated; huge layers, micro-batches and worlds are refused up front with
# a one-line error naming the field, the figure and the limit (docs/scenario-format.md "Limits").
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0
mk() {  # mk NAME PYTHON-EDIT: tiny-llama-h100 with the edit applied to scenario dict s
  python3 - "$src/scenarios/tiny-llama-h100.json" "$tmp/$1.json" "$2" <<'P'
import json, sys
s = json.load(open(sys.argv[1])); s.pop("$schema", None)
exec(sys.argv[3])
json.dump(s, open(sys.argv[2], "w"))
P
}
tiny_model='{"arch": "llama", "vocab_size": 256, "dim": 64, "n_heads": 4, "n_kv_heads": 4, "ffn_dim": 128, "max_seq_len": 64}'
mk steps20000 's["training"]["steps"] = 20000'
mk stepsmax 's["training"]["steps"] = 2**31 - 1'
mk accummax 's["training"]["grad_accum_steps"] = 2**31 - 1'
mk layers1e6 "s['model'] = dict($tiny_model, n_layers=10**6)"
mk layers2p40 "s['model'] = dict($tiny_model, n_layers=2**40)"
mk world2p20 's["fsdp"]["mesh"]["shape"] = [2**20]; s["hardware"]["nodes"] = 2**17; s["hardware"]["gpus_per_node"] = 8'

for n in steps20000 stepsmax; do
  start=$(date +%s)
  timeout 60 "$bin" simulate "$tmp/$n.json" --json "$tmp/$n.out.json" > "$tmp/$n.out" 2>&1; rc=$?
  [ "$rc" -eq 0 ] || { echo "FAIL $n: exit $rc"; cat "$tmp/$n.out"; fail=1; continue; }
  [ $(( $(date +%s) - start )) -le 30 ] || { echo "FAIL $n: took over 30 s"; fail=1; }
  grep -q "simulated 3 of .* steps; steps 4-.* extrapolated from step 3 (steady" "$tmp/$n.out" ||
    { echo "FAIL $n: no extrapolation line"; cat "$tmp/$n.out"; fail=1; }
  python3 - "$tmp/$n.out.json" "$tmp/$n.json" <<'P' || fail=1
import json, sys
r, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
steps = s["training"]["steps"]
assert r["steps"] == steps and r["simulated_steps"] == 3, (r["steps"], r["simulated_steps"])
assert r["extrapolated_steps"] == steps - 3 and r["steady_state"] is True
assert abs(r["total_time_s"] - r["rank_classes"][0]["end_time_s"]) <= 1e-9 * r["total_time_s"]
assert r["total_time_s"] >= (steps - 3) * r["step_time_s"]
assert r["total_tokens"] == steps * r["tokens_per_step"] == steps * 8 * 64
assert len(r["rank_classes"][0]["allocated_after_step"]) == 3
P
done

refused() {  # refused NAME FIELD FIGURE LIMIT
  timeout 60 "$bin" simulate "$tmp/$1.json" > "$tmp/$1.out" 2>&1; rc=$?
  [ "$rc" -eq 2 ] || { echo "FAIL $1: expected exit 2, got $rc"; fail=1; }
  [ "$(grep -c . "$tmp/$1.out")" -le 2 ] || { echo "FAIL $1: more than the progress line and one error"; fail=1; }
  for want in "fullshard: error: $2" "$3" "$4" "docs/scenario-format.md"; do
    grep -qF -- "$want" "$tmp/$1.out" || { echo "FAIL $1: missing '$want'"; cat "$tmp/$1.out"; fail=1; }
  done
}
refused layers1e6 "model.n_layers" "is 1000000" "limit of 4096"
refused layers2p40 "model.n_layers" "is 1099511627776" "limit of 4096"
refused accummax "training.grad_accum_steps" "grad_accum_steps 2147483647" "limit of 4000000"
refused world2p20 "hardware" "1048576 ranks" "limit of 131072"
[ "$fail" -eq 0 ] && echo ok
exit $fail
