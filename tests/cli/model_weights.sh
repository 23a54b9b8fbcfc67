#!/usr/bin/env bash
# model.weights in a scenario (docs/scenario-format.md, docs/checkpoints.md) with real worker
# processes: the oracle's Llama scenario (tests/data/oracle/llama, Hugging Face weights and
# config.json) trains from its weights on 2 ranks exactly as --init-from with the same file
# does, differently from the random init; --init-from overrides it; weights of another model
# and a missing file are one-line errors naming model.weights, exit 2.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
o="$src/tests/data/oracle"
# The oracle scenario on 2 ranks, in a temporary folder: its paths made absolute.
python3 - "$o/llama/scenario.json" "$o/llama" "$tmp" <<'P'
import json, os, sys
j = json.load(open(sys.argv[1])); d = sys.argv[2]; out = sys.argv[3]
j["model"]["hf_config"] = os.path.join(d, j["model"]["hf_config"])
weights = os.path.join(d, j["model"]["weights"])
j["training"]["batch_per_rank"] = 6
j["fsdp"]["mesh"]["shape"] = [2]
j["hardware"]["gpus_per_node"] = 2
j["model"]["weights"] = weights
json.dump(j, open(os.path.join(out, "weights.json"), "w"))
del j["model"]["weights"]
json.dump(j, open(os.path.join(out, "random.json"), "w"))
j["model"]["weights"] = os.path.join(d, "..", "gpt2", "model.safetensors")
json.dump(j, open(os.path.join(out, "other.json"), "w"))
j["model"]["weights"] = "missing.safetensors"
json.dump(j, open(os.path.join(out, "missing.json"), "w"))
P
"$bin" train "$tmp/weights.json" --steps 2 --metrics "$tmp/w.jsonl" > /dev/null 2>&1
"$bin" train "$tmp/random.json" --steps 2 --init-from "$o/llama/model.safetensors" --metrics "$tmp/i.jsonl" > /dev/null 2>&1
"$bin" train "$tmp/random.json" --steps 2 --metrics "$tmp/r.jsonl" > /dev/null 2>&1
# --init-from overrides model.weights: the random scenario's weights file named on the command line.
"$bin" train "$tmp/other.json" --steps 2 --init-from "$o/llama/model.safetensors" --metrics "$tmp/o.jsonl" > /dev/null 2>&1
python3 - "$tmp/w.jsonl" "$tmp/i.jsonl" "$tmp/r.jsonl" "$tmp/o.jsonl" <<'P'
import json, sys
w, i, r, o = [[sorted((x["rank"], x["loss"]) for x in json.loads(l)["ranks"]) for l in open(p)] for p in sys.argv[1:]]
assert w == i == o, (w, i, o)  # bit for bit
assert w != r, (w, r)
P
echo ok weights
set +e
"$bin" train "$tmp/other.json" --steps 1 > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "^fullshard: error: model.weights: no tensor 'model.embed_tokens.weight'" "$tmp/err" \
  && [ "$(wc -l < "$tmp/err")" -eq 1 ] || { echo "rc $rc"; cat "$tmp/err"; exit 1; }
"$bin" train "$tmp/missing.json" --steps 1 > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "^fullshard: error: model.weights: file not found" "$tmp/err" \
  && [ "$(wc -l < "$tmp/err")" -eq 1 ] || { echo "rc $rc"; cat "$tmp/err"; exit 1; }
echo ok errors
