#!/usr/bin/env bash
# training.data.sampling "shuffle" with real worker processes (docs/data.md): the epoch's windows
# in a seeded order differ from the sequential order's, the run is repeatable, 2 ranks x 2
# sequences train as 1 rank x 4 (the same global batches), and a resume from a checkpoint
# continues the permutation (4 steps straight = 2 + 2 resumed).
set -eu
bin="$1"; src="$(cd "$2" && pwd)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
sample="$src/scenarios/data/devils-dictionary"
mk() {  # out, sampling, mesh size, batch per rank
  python3 - "$src/scenarios/tiny-llama-devil-cpu2.json" "$1" "$sample" "$2" "$3" "$4" <<'P'
import json, sys
j = json.load(open(sys.argv[1]))
j["training"].update(batch_per_rank=int(sys.argv[6]), seq_len=16)
j["training"]["data"] = {"path": sys.argv[3] + "/train.bin", "sampling": sys.argv[4]}
j["fsdp"]["mesh"]["shape"] = [int(sys.argv[5])]
j["hardware"]["gpus_per_node"] = int(sys.argv[5])
json.dump(j, open(sys.argv[2], "w"))
P
}
loss_of() { python3 -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1])))' "$1"; }
mk "$tmp/seq.json" sequential 2 2
mk "$tmp/shuf.json" shuffle 2 2
mk "$tmp/shuf1.json" shuffle 1 4

"$bin" train "$tmp/shuf.json" --steps 4 --metrics "$tmp/a.jsonl" > /dev/null 2> "$tmp/err" || { cat "$tmp/err"; exit 1; }
grep -q "^data: 1 file, 58652 uint16 tokens, 3665 sequences of 16 tokens per epoch, read in a shuffled order" "$tmp/err" \
  || { cat "$tmp/err"; exit 1; }
"$bin" train "$tmp/shuf.json" --steps 4 --metrics "$tmp/b.jsonl" > /dev/null 2>&1
"$bin" train "$tmp/seq.json" --steps 4 --metrics "$tmp/c.jsonl" > /dev/null 2>&1
test "$(loss_of "$tmp/a.jsonl")" = "$(loss_of "$tmp/b.jsonl")"   # repeatable
test "$(loss_of "$tmp/a.jsonl")" != "$(loss_of "$tmp/c.jsonl")"  # not the sequential order
echo ok shuffled

# One rank of 4 sequences reads the same global batches: the first step's loss (before any
# update, so independent of how gradients are reduced) is the same.
"$bin" train "$tmp/shuf1.json" --steps 1 --metrics "$tmp/d.jsonl" > /dev/null 2>&1
python3 - "$tmp/a.jsonl" "$tmp/d.jsonl" <<'P'
import json, sys
a = json.loads(open(sys.argv[1]).readline())["loss"]
d = json.loads(open(sys.argv[2]).readline())["loss"]
assert abs(a - d) < 1e-5 * abs(a), (a, d)
P
echo ok mesh

"$bin" train "$tmp/shuf.json" --steps 2 --checkpoint-dir "$tmp/ck" --checkpoint-every 2 > /dev/null 2>&1
"$bin" checkpoint inspect "$tmp/ck" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)["data"]
assert (d["samples"], d["epoch"], d["window"]) == (8, 0, 8), d'
"$bin" train "$tmp/shuf.json" --steps 4 --checkpoint-dir "$tmp/ck" --resume --metrics "$tmp/r.jsonl" > /dev/null 2>&1
test "$(loss_of "$tmp/r.jsonl")" = "$(loss_of "$tmp/a.jsonl" | cut -d' ' -f3-)"
echo ok resume
