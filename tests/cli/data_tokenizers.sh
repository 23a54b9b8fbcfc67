#!/usr/bin/env bash
# `fullshard data tokenize --tokenizer` with a Hugging Face tokenizer.json (GPT-2's layout and
# Llama 3's) and a tiktoken ranks file: the token files hold the ids tokenizers / tiktoken gave
# for the same texts (tests/data/bpe/hf_cases.json), with the document tokens --bos / --eos ask
# for; training reads a JSONL through a tokenizer.json; an unsupported tokenizer.json is a
# one-line error naming the field, exit 2.
set -eu
bin="$1"; src="$(cd "$2" && pwd)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
bpe="$src/tests/data/bpe"

# Two documents whose ids tokenizers computed (cases 13 and 21: contractions, several scripts).
python3 - "$bpe/hf_cases.json" "$tmp" <<'P'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
with open(sys.argv[2] + "/docs.jsonl", "w") as f:
    for i in (13, 21):
        f.write(json.dumps({"text": cases[i]["text"]}) + "\n")
P
ids_of() {  # the tokens of an llm.c token file, one line
  python3 -c 'import struct,sys; d=open(sys.argv[1],"rb").read(); n=struct.unpack("<3i",d[:12])[2]; print(list(struct.unpack("<%dH"%n,d[1024:1024+2*n])))' "$1"
}
expect_ids() {  # token file, expression over c13, c21 (the cases' ids for `key`) and the tokens
  python3 - "$bpe/hf_cases.json" "$2" "$3" "$(ids_of "$1")" <<'P'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
key, want, got = sys.argv[2], sys.argv[3], eval(sys.argv[4])
c13, c21 = cases[13][key], cases[21][key]
want = eval(want)
assert got == want, (got, want)
P
}

"$bin" data tokenize "$tmp/docs.jsonl" -o "$tmp/l.bin" --tokenizer "$bpe/llama3-style-tiny.tokenizer.json" > "$tmp/out"
grep -q "wrote .* uint16 tokens (llm.c header, BPE tokenizer (Llama 3 pre-tokenizer), vocabulary 702)" "$tmp/out" || { cat "$tmp/out"; exit 1; }
expect_ids "$tmp/l.bin" llama3_tiny_json_ids "[700] + c13 + [700] + c21"   # <|begin_of_text|> before each
"$bin" data tokenize "$tmp/docs.jsonl" -o "$tmp/l2.bin" --tokenizer "$bpe/llama3-style-tiny.tokenizer.json" \
  --bos "" --eos "<|end_of_text|>" > /dev/null
expect_ids "$tmp/l2.bin" llama3_tiny_json_ids "c13 + [701] + c21 + [701]"
echo ok llama3 layout

"$bin" data tokenize "$tmp/docs.jsonl" -o "$tmp/g.bin" --tokenizer "$bpe/gpt2-first2048.tokenizer.json" > /dev/null
expect_ids "$tmp/g.bin" gpt2_json_ids "[2048] + c13 + [2048] + c21"   # <|endoftext|> before each (llm.c)
"$bin" data tokenize "$tmp/docs.jsonl" -o "$tmp/t.bin" --tokenizer "$bpe/gpt2-first2048.tiktoken" > /dev/null
cmp "$tmp/g.bin" "$tmp/t.bin"  # tokenizer.json and tiktoken file of the same ranks: the same file
echo ok gpt2 layout

# Training on JSONL through a tokenizer.json (model.vocab_size covers its 702 ids).
python3 - "$src/scenarios/tiny-llama-devil-cpu2.json" "$tmp/s.json" "$tmp" "$bpe/llama3-style-tiny.tokenizer.json" <<'P'
import json, sys
j = json.load(open(sys.argv[1]))
j["model"] = {"name": "tiny-llama-702", "arch": "llama", "vocab_size": 702, "dim": 64, "n_layers": 2, "n_heads": 4,
              "n_kv_heads": 2, "ffn_dim": 128, "max_seq_len": 128, "norm_eps": 1e-5, "rope_theta": 1e4}
j["training"].update(batch_per_rank=1, seq_len=8)
j["training"]["data"] = {"path": sys.argv[3] + "/docs.jsonl", "tokenizer": sys.argv[4], "eos": "<|end_of_text|>"}
json.dump(j, open(sys.argv[2], "w"))
P
"$bin" train "$tmp/s.json" --steps 1 > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/out" "$tmp/err"; exit 1; }
# <|begin_of_text|> (the template's) before and <|end_of_text|> ("eos") after each document.
n="$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["cases"]; print(sum(len(c[i]["llama3_tiny_json_ids"]) + 2 for i in (13, 21)))' "$bpe/hf_cases.json")"
grep -q "^data: .*docs.jsonl' (BPE .*llama3-style-tiny.tokenizer.json), $n tokens" "$tmp/err" || { echo "want $n tokens"; cat "$tmp/err"; exit 1; }
echo ok train

expect_error() {  # pattern, then the command's arguments
  local pat="$1"; shift
  set +e; "$bin" "$@" > "$tmp/o" 2> "$tmp/e"; local rc=$?; set -e
  test $rc -eq 2 || { echo "exit $rc for $*"; cat "$tmp/e"; exit 1; }
  test "$(grep -c . "$tmp/e")" -eq 1 || { echo "not one line for $*"; cat "$tmp/e"; exit 1; }
  grep -q -- "$pat" "$tmp/e" || { echo "no '$pat' for $*"; cat "$tmp/e"; exit 1; }
}
echo '{"model": {"type": "WordPiece", "vocab": {}}, "normalizer": null}' > "$tmp/wp.json"
expect_error "wp.json' model.type is 'WordPiece'" data tokenize "$tmp/docs.jsonl" -o "$tmp/x.bin" --tokenizer "$tmp/wp.json"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["normalizer"]={"type":"NFKC"}; json.dump(j,open(sys.argv[2],"w"))' \
  "$bpe/llama3-style-tiny.tokenizer.json" "$tmp/nfkc.json"
expect_error "nfkc.json' normalizer is {\"type\":\"NFKC\"}" data tokenize "$tmp/docs.jsonl" -o "$tmp/x.bin" --tokenizer "$tmp/nfkc.json"
expect_error "error: --bos: is '<|nope|>', not a special token" data tokenize "$tmp/docs.jsonl" -o "$tmp/x.bin" \
  --tokenizer "$bpe/llama3-style-tiny.tokenizer.json" --bos "<|nope|>"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["training"]["data"]["tokenizer"]="byte"; json.dump(j,open(sys.argv[2],"w"))' \
  "$tmp/s.json" "$tmp/byte.json"
expect_error "training.data.eos: is '<|end_of_text|>'" train "$tmp/byte.json" --steps 1
# NaN passed the range check and reached the split (std::vector's length_error, exit 1).
expect_error "error: --val-fraction: is nan; give a fraction in \[0, 1)" data tokenize "$tmp/docs.jsonl" -o "$tmp/x.bin" \
  --val-fraction nan --val-output "$tmp/v.bin"
test ! -e "$tmp/x.bin"
echo ok errors
