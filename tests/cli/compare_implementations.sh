#!/usr/bin/env bash
# model.implementation on the CPU backend: tiny-llama-cpu2 (2 steps) with every runnable preset
# and built variant, fp32 and bf16 mixed precision, with and without full activation
# checkpointing (which exercises NOTE [Module arguments live until the call returns]): the
# simulator's peak allocated and reserved bytes equal what the CPU backend measures, on every
# rank, to the byte, and the loss is finite. The chunked loss (torchtitan's ChunkedLossWrapper)
# also runs with fsdp.units "embed_blocks_head" (the embedding and fully_shard([norm, output])
# as units of their own, FSDP2's grouped hooks), and with tied embeddings (TIED=1: the
# embedding, final norm and output as one grouped unit, torchtitan's weight-tying layout).
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
variant() {  # name, implementation JSON, mixed precision JSON, ac mode [, fsdp units]
  python3 - "$src/scenarios/tiny-llama-cpu2.json" "$tmp/$1.json" "$2" "$3" "$4" "${5:-blocks}" <<'P'
import json, os, sys
j = json.load(open(sys.argv[1]))
j["fsdp"]["units"] = sys.argv[6]
if sys.argv[6] == "embed_blocks_head":  # torchtitan: fully_shard([norm, output], reshard_after_forward=False)
    j["fsdp"]["per_unit"] = {"output": {"reshard_after_forward": False}}
j.pop("$schema", None)
j["model"] = {"name": "tiny-llama", "implementation": json.loads(sys.argv[3])}
if os.environ.get("TIED"):  # tied: fully_shard([tok_embeddings, norm, output], ...)
    j["model"]["tie_embeddings"] = True
j["training"]["steps"] = 2
j["training"]["seq_len"] = 16
j["training"]["activation_checkpointing"] = {"mode": sys.argv[5]}
mp = json.loads(sys.argv[4])
if mp: j["fsdp"]["mixed_precision"] = mp
json.dump(j, open(sys.argv[2], "w"))
P
}
compares_equal() {  # scenario path without .json, label [, rank count]: fullshard compare says equal
  # and every rank's predicted peak allocated and reserved bytes equal the measured ones
  "$bin" compare "$1.json" --json "$1.out.json" > "$1.out" 2>&1 || { echo "compare failed for $2"; cat "$1.out"; exit 1; }
  python3 - "$1.out.json" "$2" "${3:-}" <<'P'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["equal"] is True and len(c["ranks"]) == c["world_size"], sys.argv[2]
if sys.argv[3]:
    assert c["world_size"] == int(sys.argv[3]), (sys.argv[2], c["world_size"])
for r in c["ranks"]:
    assert r["predicted_peak_allocated_bytes"] == r["measured_peak_allocated_bytes"], (sys.argv[2], r)
    assert r["predicted_peak_reserved_bytes"] == r["measured_peak_reserved_bytes"], (sys.argv[2], r)
P
}
n=0
for impl in '"fullshard"' '{"loss": "bf16_logits"}' '{"keep_logits": true}' \
            '{"loss": "bf16_logits", "keep_logits": true}' '{"rms_norm": "eager"}' \
            '{"rope": "complex"}' '{"gqa": "repeat_kv"}' '"torchtitan-2024"' '{"rope": "rotate_half"}' \
            '"hf-transformers"' '{"attention": "cudnn"}' '{"attention": "efficient", "gqa": "repeat_kv"}' \
            '"torchtitan-2024-04"' '{"loss": "fp32_output"}' '"torchtitan"' '{"loss": "chunked", "loss_chunks": 2}' \
            '{"compile": true}' '{"preset": "torchtitan-2024", "compile": true}'; do
  for mp in '{}' '{"param_dtype": "bf16", "reduce_dtype": "fp32"}'; do
    for ac in none full; do
      n=$((n + 1)); name="v$n"
      variant "$name" "$impl" "$mp" "$ac"
      compares_equal "$tmp/$name" "$impl $mp $ac"
      echo "ok $impl mp=$mp ac=$ac"
    done
  done
done
# The chunked loss under torchtitan's unit layout (grouped [norm, output] unit), and the other
# losses with that layout too.
for impl in '"torchtitan"' '{"loss": "chunked", "loss_chunks": 4}' '"fullshard"' '"torchtitan-2024"'; do
  for mp in '{}' '{"param_dtype": "bf16", "reduce_dtype": "fp32"}'; do
    for ac in none full; do
      n=$((n + 1)); name="v$n"
      variant "$name" "$impl" "$mp" "$ac" embed_blocks_head
      compares_equal "$tmp/$name" "$impl $mp $ac embed_blocks_head"
      echo "ok $impl mp=$mp ac=$ac units=embed_blocks_head"
    done
  done
done
# Tied embeddings under torchtitan's layout: the one grouped [tok_embeddings, norm, output]
# unit, with the logits loss and the chunked loss.
for impl in '"torchtitan"' '{"loss": "chunked", "loss_chunks": 4}'; do
  for mp in '{}' '{"param_dtype": "bf16", "reduce_dtype": "fp32"}'; do
    n=$((n + 1)); name="v$n"
    TIED=1 variant "$name" "$impl" "$mp" none embed_blocks_head
    compares_equal "$tmp/$name" "tied $impl $mp embed_blocks_head"
    echo "ok tied $impl mp=$mp units=embed_blocks_head"
  done
done
# The validation rows' checkpointing (op-level selective: the mm / SDPA outputs cached, the
# eager chains recomputed) with the torchtitan-2024 preset, fp32 and bf16, and the other SDPA
# backends in bf16.
for run in '"torchtitan-2024"|{}' '"torchtitan-2024"|{"param_dtype": "bf16", "reduce_dtype": "fp32"}' \
           '{"attention": "cudnn"}|{"param_dtype": "bf16", "reduce_dtype": "fp32"}' \
           '{"attention": "efficient", "gqa": "repeat_kv"}|{"param_dtype": "bf16", "reduce_dtype": "fp32"}' \
           '{"compile": true}|{"param_dtype": "bf16", "reduce_dtype": "fp32"}'; do
  impl="${run%%|*}"; mp="${run#*|}"
  n=$((n + 1)); name="v$n"
  variant "$name" "$impl" "$mp" selective_op
  compares_equal "$tmp/$name" "$impl $mp selective_op"
  echo "ok $impl mp=$mp ac=selective_op"
done
# An eager decomposition (rms_norm=eager, rope=rotate_half; gqa=repeat_kv against native GQA)
# computes the default's math up to fp32 rounding order: in fp32 the losses of 4 steps (every step after the first depends on the gradients through the op)
# agree within 1e-5 relative with the fused variant's.
losses_match() {  # metrics A, metrics B, label: 4 steps each, equal within 1e-5 relative
  python3 - "$1" "$2" "$3" <<'P'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 4, (a, b)
for x, y in zip(a, b):
    assert abs(x - y) <= 1e-5 * abs(x), (sys.argv[3], a, b)
print("ok", sys.argv[3], "losses match within 1e-5:", b)
P
}
same_loss() {  # implementation JSON of the variant to check against "fullshard" [, its fsdp units]
  for i in 0 1; do
    impl='"fullshard"'; units=blocks; [ "$i" -eq 1 ] && { impl="$1"; units="${2:-blocks}"; }
    variant "loss$i" "$impl" '{}' none "$units"
    python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); j["training"]["steps"] = 4; json.dump(j, open(sys.argv[1], "w"))' "$tmp/loss$i.json"
    "$bin" train "$tmp/loss$i.json" --metrics "$tmp/loss$i.jsonl" > "$tmp/loss$i.out" 2>&1 \
      || { echo "train failed for $impl"; cat "$tmp/loss$i.out"; exit 1; }
  done
  losses_match "$tmp/loss0.jsonl" "$tmp/loss1.jsonl" "$1 (against the fused variant)"
}
same_loss '{"rms_norm": "eager"}'
same_loss '{"loss": "fp32_output"}'  # the same .float() inside the root instead of in the loss
same_loss '{"gqa": "repeat_kv"}'  # tiny-llama: 4 heads over 2 kv heads
same_loss '{"rope": "rotate_half"}'  # the fused kernel's pairing and angles, op by op
same_loss '{"attention": "cudnn"}'  # SDPA's maths on every backend; only saved tensors / scratch differ
same_loss '{"attention": "efficient", "gqa": "repeat_kv"}'
same_loss '{"loss": "chunked"}'  # per-chunk means over chunks: the mean, up to fp32 rounding
same_loss '{"loss": "chunked", "loss_chunks": 16}' embed_blocks_head
same_loss '"fullshard"' embed_blocks_head  # the same program under other FSDP units
# Tied: the chunked loss under the tied unit against the logits loss under "blocks" (both tied).
TIED=1 same_loss '{"loss": "chunked", "loss_chunks": 16}' embed_blocks_head
same_loss '{"compile": true}'  # the fused regions compute the eager chain's maths in fp32
same_loss '{"compile": true, "rope": "rotate_half"}'  # the compiled RoPE keeps the variant's pairing
# The efficient backend with native GQA (tiny-llama: 4 heads over 2 kv heads) is refused.
variant eff-gqa '{"attention": "efficient"}' '{}' none
set +e
"$bin" simulate "$tmp/eff-gqa.json" > "$tmp/eff-gqa.out" 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] && [ "$(wc -l < "$tmp/eff-gqa.out")" -eq 1 ] && grep -q "model.implementation.attention.*repeat_kv" "$tmp/eff-gqa.out" \
  || { echo "efficient + GQA: exit $rc"; cat "$tmp/eff-gqa.out"; exit 1; }
echo "ok efficient + native GQA refused: $(cat "$tmp/eff-gqa.out")"
# compile = true under tensor parallelism (tiny-llama-tp2-cpu4: dp 2 x tp 2): the regions run on
# sequence shards around the tp collectives; predicted == measured on every rank.
python3 - "$src/scenarios/tiny-llama-tp2-cpu4.json" "$tmp/tp-compile.json" <<'P'
import json, sys
j = json.load(open(sys.argv[1]))
j.pop("$schema", None)
j["model"] = {"name": j["model"] if isinstance(j["model"], str) else j["model"]["name"], "implementation": {"compile": True}}
j["training"]["steps"] = 2
json.dump(j, open(sys.argv[2], "w"))
P
compares_equal "$tmp/tp-compile" "compile + tp" 4
echo "ok compile + tp 2"
# The chunked loss under tensor parallelism (NOTE [Chunked loss under tp]): the norm's output
# gathered to Replicate, each chunk's vocab-sharded logits into loss parallel. Both unit layouts:
# predicted == measured on every rank, and 4-step losses equal the unchunked tp run's within 1e-5.
python3 - "$src/scenarios/tiny-llama-tp2-cpu4.json" "$tmp" <<'P'
import json, sys
j = json.load(open(sys.argv[1]))
j.pop("$schema", None)
j["model"] = {"name": j["model"] if isinstance(j["model"], str) else j["model"]["name"]}
j["training"]["steps"] = 4
json.dump(j, open(sys.argv[2] + "/tp-plain.json", "w"))
for units in ("blocks", "embed_blocks_head"):
    k = json.loads(json.dumps(j))
    k["model"]["implementation"] = {"loss": "chunked", "loss_chunks": 8}
    k["fsdp"]["units"] = units
    if units == "blocks":
        k["fsdp"]["per_unit"] = {"root": {"reshard_after_forward": False}}
    json.dump(k, open(sys.argv[2] + "/tp-chunked-" + units + ".json", "w"))
P
"$bin" train "$tmp/tp-plain.json" --metrics "$tmp/tp-plain.jsonl" > "$tmp/tp-plain.out" 2>&1 \
  || { echo "train failed for tp"; cat "$tmp/tp-plain.out"; exit 1; }
for units in blocks embed_blocks_head; do
  f="$tmp/tp-chunked-$units"
  compares_equal "$f" "chunked + tp ($units)" 4
  "$bin" train "$f.json" --metrics "$f.jsonl" > "$f.train.out" 2>&1 || { echo "train failed for chunked + tp"; cat "$f.train.out"; exit 1; }
  losses_match "$tmp/tp-plain.jsonl" "$f.jsonl" "chunked + tp 2 ($units; predicted == measured) against unchunked tp"
done
