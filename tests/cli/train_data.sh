#!/usr/bin/env bash
# Training on your own data (docs/data.md) with real worker processes: `fullshard data
# tokenize` reproduces the shipped token files byte for byte; `train --data` on text, a token
# file, a glob of shards and nanoGPT's headerless layout; --eval-every prints the validation
# loss and writes eval_loss to the metrics; a resume continues at the saved data position; bad
# data is a one-line error naming the file, exit 2.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
sample="$src/scenarios/data/devils-dictionary"

# The shipped token files are what the documented command writes.
"$bin" data tokenize "$sample/devils-dictionary.txt" -o "$tmp/train.bin" --val-fraction 0.1 --val-output "$tmp/val.bin" > "$tmp/out"
grep -q "wrote 58652 uint16 tokens (llm.c header, byte tokenizer, vocabulary 256)" "$tmp/out" || { cat "$tmp/out"; exit 1; }
cmp "$tmp/train.bin" "$sample/train.bin"
cmp "$tmp/val.bin" "$sample/val.bin"
"$bin" data inspect "$sample/train.bin" | grep -q "58652 uint16 tokens, llm.c header, largest token 125"
# --vocab-size names itself, not the model, in its error (exit 2).
rc=0; "$bin" data inspect "$sample/train.bin" --vocab-size 100 > /dev/null 2> "$tmp/err" || rc=$?
[ $rc -eq 2 ] && grep -q "not below --vocab-size 100.*raise --vocab-size" "$tmp/err" || { echo "rc $rc"; cat "$tmp/err"; exit 1; }
echo ok tokenize

# A small copy of the shipped scenario (seq 16, 2 x 2 sequences) keeps the runs short.
sc="$tmp/s.json"
python3 - "$src/scenarios/tiny-llama-devil-cpu2.json" "$sc" "$sample" <<'P'
import json, sys
j = json.load(open(sys.argv[1]))
j["training"].update(batch_per_rank=2, seq_len=16)
j["training"]["data"] = {"path": sys.argv[3] + "/train.bin", "val_path": sys.argv[3] + "/val.bin"}
json.dump(j, open(sys.argv[2], "w"))
P
"$bin" train "$sc" --steps 4 --eval-every 2 --eval-batches 2 --metrics "$tmp/m.jsonl" > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/out" "$tmp/err"; exit 1; }
grep -q "^data: 1 file, 58652 uint16 tokens, 3665 sequences of 16 tokens per epoch, read in order" "$tmp/err" || { cat "$tmp/err"; exit 1; }
grep -q "^step 2: val loss [0-9.]*$" "$tmp/err"
grep -q "^step 4: val loss [0-9.]*$" "$tmp/err"
grep -q "validation loss [0-9.]* after step 4 (2 batches)" "$tmp/out"
python3 - "$tmp/m.jsonl" <<'P'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [("eval_loss" in r) for r in rows] == [False, True, False, True], rows
assert all(4.0 < r["eval_loss"] < 6.0 for r in rows if "eval_loss" in r)
P
echo ok eval

# The same tokens as text, as headerless uint16 (nanoGPT), as uint32 shards through a glob:
# the same data, so the same losses.
loss_of() { python3 -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1])))' "$1"; }
"$bin" train "$sc" --steps 2 --metrics "$tmp/a.jsonl" > /dev/null 2>&1
python3 - "$sample/train.bin" "$tmp" <<'P'
import struct, sys
data = open(sys.argv[1], "rb").read()[1024:]
toks = struct.unpack("<%dH" % (len(data) // 2), data)
open(sys.argv[2] + "/nano.bin", "wb").write(data)
open(sys.argv[2] + "/train.txt", "wb").write(bytes(toks))
half = len(toks) // 2
for i, part in enumerate([toks[:half], toks[half:]]):
    hdr = struct.pack("<256i", *([20240801, 7, len(part)] + [0] * 253))
    open(sys.argv[2] + "/shard_%02d.bin" % i, "wb").write(hdr + struct.pack("<%dI" % len(part), *part))
P
"$bin" train "$sc" --steps 2 --data "$tmp/train.txt" --metrics "$tmp/b.jsonl" > /dev/null 2>&1
"$bin" train "$sc" --steps 2 --data "$tmp/nano.bin" --data-format uint16 --metrics "$tmp/c.jsonl" > /dev/null 2>&1
"$bin" train "$sc" --steps 2 --data "$tmp/shard_*.bin" --metrics "$tmp/d.jsonl" > /dev/null 2>&1
for x in b c d; do test "$(loss_of "$tmp/$x.jsonl")" = "$(loss_of "$tmp/a.jsonl")" || { echo "$x differs"; exit 1; }; done
echo ok formats

# Resume: 4 steps straight equal 2 + 2 resumed, and the checkpoint records the data position.
"$bin" train "$sc" --steps 4 --metrics "$tmp/straight.jsonl" > /dev/null 2>&1
"$bin" train "$sc" --steps 2 --checkpoint-dir "$tmp/ck" --checkpoint-every 2 > /dev/null 2>&1
"$bin" checkpoint inspect "$tmp/ck" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)["data"]
assert (d["samples"], d["epoch"], d["window"]) == (8, 0, 8), d'
"$bin" train "$sc" --steps 4 --checkpoint-dir "$tmp/ck" --resume --metrics "$tmp/r.jsonl" > /dev/null 2>&1
test "$(loss_of "$tmp/r.jsonl")" = "$(loss_of "$tmp/straight.jsonl" | cut -d' ' -f3-)"
echo ok resume
# The validation passes change nothing in training (same parameters, same data position).
test "$(loss_of "$tmp/m.jsonl")" = "$(loss_of "$tmp/straight.jsonl")"
echo ok eval changes nothing

# Bad data: one line naming the file and the fix, exit 2, before any worker starts.
expect_error() {  # pattern, then the train arguments
  local pat="$1"; shift
  set +e; "$bin" train "$sc" --steps 1 "$@" > "$tmp/o" 2> "$tmp/e"; local rc=$?; set -e
  test $rc -eq 2 || { echo "exit $rc for $*"; cat "$tmp/e"; exit 1; }
  test "$(grep -c . "$tmp/e")" -eq 1 || { echo "not one line for $*"; cat "$tmp/e"; exit 1; }
  grep -q -- "$pat" "$tmp/e" || { echo "no '$pat' for $*"; cat "$tmp/e"; exit 1; }
}
expect_error "missing.bin' does not exist" --data "$tmp/missing.bin"
expect_error "nano.bin' does not start with an llm.c header.*training.data.format \"uint16\"" --data "$tmp/nano.bin"
printf 'abc' > "$tmp/odd.bin"
expect_error "odd.bin' has 3 bytes, not a whole number of uint16 tokens" --data "$tmp/odd.bin" --data-format uint16
printf 'short' > "$tmp/short.txt"
expect_error "short.txt' has 5 tokens, not more than training.seq_len 16" --data "$tmp/short.txt"
python3 -c '
import struct, sys
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 1, 40, *([0] * 253)) + struct.pack("<40H", *([1] * 39 + [300])))' "$tmp/big.bin"
expect_error "big.bin' has token 300 at offset 39, not below model.vocab_size 256" --data "$tmp/big.bin"
head -c 1500 "$sample/train.bin" > "$tmp/cut.bin"
expect_error "cut.bin' has 1500 bytes but its header says 58652 uint16 tokens" --data "$tmp/cut.bin"
expect_error "no validation data" --eval-every 1 --data "$tmp/train.txt"
echo ok errors
