#!/usr/bin/env bash
# Sharded checkpoints with real worker processes (docs/checkpoints.md): 6 steps straight equal
# 3 steps + --resume 3 steps bit for bit; `checkpoint inspect` and `checkpoint export`
# (Hugging Face names, byte-exact against the rank files); DeepSeek-V3's expert bias saved,
# resumed and exported; damaged files and a checkpoint of another model are one-line errors
# with exit 2.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
sc="$tmp/tiny.json"
python3 - "$src/scenarios/tiny-llama-cpu2.json" "$sc" <<'P'
import json, sys
j = json.load(open(sys.argv[1]))
j["training"]["batch_per_rank"] = 2
j["training"]["seq_len"] = 16
json.dump(j, open(sys.argv[2], "w"))
P
"$bin" train "$sc" --steps 6 --metrics "$tmp/straight.jsonl" > /dev/null 2>&1
"$bin" train "$sc" --steps 3 --checkpoint-dir "$tmp/ck" --checkpoint-every 3 --metrics "$tmp/a.jsonl" > /dev/null 2>&1
test -f "$tmp/ck/step-00000003/metadata.json"
test "$(cat "$tmp/ck/latest")" = step-00000003
"$bin" train "$sc" --steps 6 --checkpoint-dir "$tmp/ck" --resume --metrics "$tmp/b.jsonl" > "$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
python3 - "$tmp/straight.jsonl" "$tmp/a.jsonl" "$tmp/b.jsonl" <<'P'
import json, sys
rows = [[json.loads(l) for l in open(p)] for p in sys.argv[1:]]
key = lambda ranks: sorted((x["rank"], x["loss"]) for x in ranks)
straight = {r["step"]: key(r["ranks"]) for r in rows[0]}
resumed = rows[1] + rows[2]
assert [r["step"] for r in resumed] == [0, 1, 2, 3, 4, 5], [r["step"] for r in resumed]
for r in resumed:  # every rank's loss, bit for bit (JSON keeps doubles exactly)
    assert key(r["ranks"]) == straight[r["step"]], (r["step"], r["ranks"], straight[r["step"]])
P
echo ok resume

# Async save with --keep-last 2 over real workers: the two newest remain, the summary and the
# measured report give the host staging bytes and the save time exposed and hidden, and a
# resume from the async checkpoint continues bit for bit.
"$bin" train "$sc" --steps 4 --checkpoint-dir "$tmp/ack" --checkpoint-every 1 --keep-last 2 --checkpoint-mode async \
  --json "$tmp/ack.json" > "$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
[ "$(ls "$tmp/ack" | tr '\n' ' ')" = "latest step-00000003 step-00000004 " ] || { ls -a "$tmp/ack"; exit 1; }
grep -q "checkpoints: 4 async saves, host staging .* per rank (largest), save time exposed" "$tmp/out" || { cat "$tmp/out"; exit 1; }
python3 - "$tmp/ack.json" <<'P'
import json, sys
ck = json.load(open(sys.argv[1]))["checkpoint_saves"]
assert len(ck) == 2 and all(c["mode"] == "async" and c["saves"] == 4 and c["staging_bytes"] > 0 for c in ck), ck
P
"$bin" train "$sc" --steps 6 --resume "$tmp/ack/step-00000003" --metrics "$tmp/c.jsonl" > /dev/null 2>&1
python3 - "$tmp/straight.jsonl" "$tmp/c.jsonl" <<'P'
import json, sys
rows = [[json.loads(l) for l in open(p)] for p in sys.argv[1:]]
key = lambda ranks: sorted((x["rank"], x["loss"]) for x in ranks)
straight = {r["step"]: key(r["ranks"]) for r in rows[0]}
assert [r["step"] for r in rows[1]] == [3, 4, 5]
for r in rows[1]:
    assert key(r["ranks"]) == straight[r["step"]], r["step"]
P
echo ok async keep-last

# The simulator's checkpoint cost (NOTE [Checkpoint cost]), the saves it plays (NOTE [Playing a
# checkpoint save]: a save after steps 1 and 3 of 4) and the planner's flag.
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["training"]["steps"]=4; j["training"]["checkpoint"]={"every":2,"mode":"async"}; json.dump(j,open(sys.argv[2],"w"))' "$sc" "$tmp/ck-sim.json"
"$bin" simulate "$tmp/ck-sim.json" --json "$tmp/ck-sim-report.json" --trace "$tmp/ck-trace.json" --timeline "$tmp/ck.svg" > "$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
# The timeline's checkpoint lane: each played save's write and the host's wait.
[ "$(grep -c 'class="ck-write"' "$tmp/ck.svg")" -eq 2 ] && [ "$(grep -c 'class="ck-save"' "$tmp/ck.svg")" -eq 2 ] || { grep -c ck- "$tmp/ck.svg"; exit 1; }
"$bin" plot "$tmp/ck-sim-report.json" -o "$tmp/ck.html" > /dev/null
grep -q '"ck":\[\[' "$tmp/ck.html" || { echo "no checkpoint lane in the page data"; exit 1; }
python3 - "$tmp/ck-trace.json" "$tmp/ck-sim-report.json" <<'P'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
ck = json.load(open(sys.argv[2]))["checkpoint"]
saves = [e for e in ev if e.get("cat") == "checkpoint" and e["name"].startswith("checkpoint save")]
writes = [e for e in ev if e.get("cat") == "checkpoint" and e["name"] == "checkpoint write"]
assert saves and writes and len(saves) == len(writes), (len(saves), len(writes))
assert [p["after_step"] for p in ck["played"]] == [1, 3], ck["played"]
assert abs(saves[0]["dur"] - ck["played"][0]["exposed_s"] * 1e6) < 1e-3 and abs(writes[0]["dur"] - ck["write_s"] * 1e6) < 1e-3
assert any(e["name"].startswith("checkpoint d2h ") and e["tid"] == 7 for e in ev)  # on device_to_host
P
grep -q "checkpoint every 2 steps (async): .* per rank, device-to-host .* s per step amortised" "$tmp/out" || { cat "$tmp/out"; exit 1; }
grep -q "played: 2 save(s) after step 1, 3" "$tmp/out" || { cat "$tmp/out"; exit 1; }
grep -q "async: host staging .* per rank (host memory, not in the device figures)" "$tmp/out" || { cat "$tmp/out"; exit 1; }
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); c=r["checkpoint"]; assert c["mode"]=="async" and c["every"]==2 and r["step_time_with_checkpoint_s"]>r["step_time_s"], c' "$tmp/ck-sim-report.json"
set +e
"$bin" plan --model llama3.1-8b --gpus 8 --gpu h100-sxm-80gb --seq-len 8192 --checkpoint-mode async > /dev/null 2> "$tmp/err"; rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "^fullshard: error: --checkpoint-mode: is given without --checkpoint-every" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo ok simulated checkpoint cost

"$bin" checkpoint inspect "$tmp/ck" > "$tmp/inspect"
grep -q "step 3 (resumes at step 3)" "$tmp/inspect"
grep -q "mesh replicate 1 x shard 2" "$tmp/inspect"
grep -q "param/tok_embeddings.weight" "$tmp/inspect"
grep -q "consistent" "$tmp/inspect"
"$bin" checkpoint inspect "$tmp/ck/step-00000003" --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["consistent"] and j["step"] == 3 and j["world_size"] == 2 and j["arch"] == "llama", j
assert any(t["name"] == "exp_avg_sq/layers.1.feed_forward.w2.weight" for t in j["tensors"])'
echo ok inspect

"$bin" checkpoint export "$tmp/ck" --safetensors "$tmp/model.safetensors" > /dev/null
"$bin" checkpoint export "$tmp/ck" --safetensors "$tmp/sharded" --max-shard-size 100000 > /dev/null
python3 - "$tmp/ck/step-00000003" "$tmp/model.safetensors" "$tmp/sharded" <<'P'
import json, os, struct, sys
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    return {k: (v, b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}, meta
folder, model, sharded = sys.argv[1:]
ranks = [read(os.path.join(folder, "shard-0000%d-of-00002.safetensors" % r))[0] for r in range(2)]
out, meta = read(model)
assert meta == {"format": "pt"}, meta
names = {"tok_embeddings.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
         "output.weight": "lm_head.weight", "layers.0.attention.wq.weight": "model.layers.0.self_attn.q_proj.weight",
         "layers.1.feed_forward.w1.weight": "model.layers.1.mlp.gate_proj.weight",
         "layers.1.ffn_norm.weight": "model.layers.1.post_attention_layernorm.weight"}
for ours, hf in names.items():
    whole = ranks[0]["param/" + ours][1] + ranks[1]["param/" + ours][1]  # rows of rank 0, then rank 1
    assert out[hf][1] == whole, hf  # every byte
params = [k for k in ranks[0] if k.startswith("param/")]
assert len(out) == len(params), (len(out), len(params))
index = json.load(open(os.path.join(sharded, "model.safetensors.index.json")))
files = sorted(set(index["weight_map"].values()))
assert len(files) > 1 and files[0].startswith("model-00001-of-"), files
merged = {}
for f in files:
    merged.update(read(os.path.join(sharded, f))[0])
assert set(merged) == set(out) == set(index["weight_map"])
assert all(merged[k][1] == out[k][1] for k in out)
assert index["metadata"]["total_size"] == sum(len(v[1]) for v in out.values())
P
echo ok export

# Start from the exported weights (sharded layout): the first step's loss is below a fresh start's.
"$bin" train "$sc" --steps 1 --init-from "$tmp/sharded" --metrics "$tmp/i.jsonl" > /dev/null 2>&1
python3 - "$tmp/straight.jsonl" "$tmp/i.jsonl" <<'P'
import json, sys
fresh, init = [json.loads(open(p).readline())["loss"] for p in sys.argv[1:]]
assert init < fresh - 0.01, (init, fresh)
P
echo ok init-from

# DeepSeek-V3's expert bias (NOTE [Persistent buffers in checkpoints]): saved as a buffer/
# tensor, whole, in file 0; 2 + --resume 2 steps equal 4 bit for bit; exported with
# --names fullshard; --init-from loads it back.
bs="$tmp/bias.json"
python3 - "$src/scenarios/tiny-deepseek-bias-cpu2.json" "$bs" <<'P'
import json, sys
j = json.load(open(sys.argv[1]))
j["training"]["batch_per_rank"] = 2
j["training"]["seq_len"] = 16
j["model"]["moe"]["load_balance_coeff"] = 2e-3  # the bias: +-0.002, +-0.004 (saved), +-0.002: it moves the routing
json.dump(j, open(sys.argv[2], "w"))
P
"$bin" train "$bs" --steps 4 --metrics "$tmp/bs.jsonl" > /dev/null 2>&1
"$bin" train "$bs" --steps 2 --checkpoint-dir "$tmp/bck" --checkpoint-every 2 > /dev/null 2>&1
"$bin" train "$bs" --steps 4 --checkpoint-dir "$tmp/bck" --resume --metrics "$tmp/br.jsonl" > "$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
python3 - "$tmp/bs.jsonl" "$tmp/br.jsonl" <<'P'
import json, sys
rows = [[json.loads(l) for l in open(p)] for p in sys.argv[1:]]
key = lambda ranks: sorted((x["rank"], x["loss"]) for x in ranks)
straight = {r["step"]: key(r["ranks"]) for r in rows[0]}
assert [r["step"] for r in rows[1]] == [2, 3], [r["step"] for r in rows[1]]
for r in rows[1]:
    assert key(r["ranks"]) == straight[r["step"]], (r["step"], r["ranks"], straight[r["step"]])
P
"$bin" checkpoint inspect "$tmp/bck" > "$tmp/inspect"
grep -q "buffer/layers.1.moe.expert_bias  *F32  *\[4\]  *16  *4$" "$tmp/inspect" || { cat "$tmp/inspect"; exit 1; }
! grep -q "tokens_per_expert" "$tmp/inspect"
"$bin" checkpoint export "$tmp/bck" --names fullshard --safetensors "$tmp/bias.safetensors" > /dev/null
python3 - "$tmp/bck/step-00000002/shard-00000-of-00002.safetensors" "$tmp/bias.safetensors" <<'P'
import json, struct, sys
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
saved, out = read(sys.argv[1])["buffer/layers.1.moe.expert_bias"], read(sys.argv[2])
assert out["layers.1.moe.expert_bias"] == saved and saved != bytes(16), saved
P
# --init-from the export loads the bias (runner/init_weights.cc): routing with it, the first
# step's loss differs from the same weights with the bias zeroed.
python3 - "$tmp/bias.safetensors" "$tmp/bias0.safetensors" <<'P'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
e = json.loads(b[8:8 + n])["layers.1.moe.expert_bias"]
lo, hi = 8 + n + e["data_offsets"][0], 8 + n + e["data_offsets"][1]
assert bytes(b[lo:hi]) != bytes(hi - lo)
b[lo:hi] = bytes(hi - lo)
open(sys.argv[2], "wb").write(b)
P
for w in bias bias0; do
  "$bin" train "$bs" --steps 1 --init-from "$tmp/$w.safetensors" --metrics "$tmp/$w.jsonl" \
    > "$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
done
python3 - "$tmp/bias.jsonl" "$tmp/bias0.jsonl" <<'P'
import json, sys
loss = [sorted((x["rank"], x["loss"]) for x in json.loads(open(p).readline())["ranks"]) for p in sys.argv[1:]]
assert loss[0] != loss[1], loss
P
echo ok expert bias

set +e
# A checkpoint of another model: exit 2, one line naming the tensor.
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["model"]={"arch":"llama","name":"x","vocab_size":256,"dim":64,"n_layers":2,"n_heads":4,"ffn_dim":96,"max_seq_len":64}; json.dump(j,open(sys.argv[2],"w"))' "$sc" "$tmp/other.json"
"$bin" train "$tmp/other.json" --steps 6 --resume "$tmp/ck" > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || { echo "other model: exit $rc"; cat "$tmp/err"; exit 1; }
grep -q "tensor 'param/" "$tmp/err" || { cat "$tmp/err"; exit 1; }
# Flags: every without a folder, resume of an empty folder, resume past --steps.
"$bin" train "$sc" --checkpoint-every 2 > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "^fullshard: error: --checkpoint-every: is given without --checkpoint-dir" "$tmp/err" || { cat "$tmp/err"; exit 1; }
"$bin" train "$sc" --checkpoint-dir "$tmp/x" --checkpoint-every 2 --checkpoint-mode later > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "^fullshard: error: --checkpoint-mode: is 'later'" "$tmp/err" || { cat "$tmp/err"; exit 1; }
"$bin" train "$sc" --checkpoint-dir "$tmp/x" --keep-last 2 > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "^fullshard: error: --keep-last: is given without --checkpoint-every" "$tmp/err" || { cat "$tmp/err"; exit 1; }
"$bin" train "$sc" --checkpoint-dir "$tmp/x" --checkpoint-every 2 --keep-last -1 > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "^fullshard: error: --keep-last: is -1" "$tmp/err" || { cat "$tmp/err"; exit 1; }
mkdir "$tmp/empty"
"$bin" train "$sc" --checkpoint-dir "$tmp/empty" --resume > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "no committed checkpoint" "$tmp/err" || { cat "$tmp/err"; exit 1; }
"$bin" train "$sc" --steps 3 --resume "$tmp/ck" > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "pass --steps larger than 3" "$tmp/err" || { cat "$tmp/err"; exit 1; }
# A truncated rank file: inspect names it, exit 2, one line.
f="$tmp/ck/step-00000003/shard-00001-of-00002.safetensors"
python3 -c 'import os,sys; os.truncate(sys.argv[1], os.path.getsize(sys.argv[1]) - 3)' "$f"
"$bin" checkpoint inspect "$tmp/ck" > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "$f" "$tmp/err" && [ "$(wc -l < "$tmp/err")" -eq 1 ] || { echo "rc $rc"; cat "$tmp/err"; exit 1; }
"$bin" checkpoint export "$tmp/ck" --safetensors "$tmp/bad.safetensors" > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 2 ] && [ ! -e "$tmp/bad.safetensors" ] || { echo "rc $rc"; cat "$tmp/err"; exit 1; }
python3 -c 'import sys; f=open(sys.argv[1],"r+b"); f.seek(9); f.write(b"#"); f.close()' "$tmp/model.safetensors"
"$bin" train "$sc" --steps 1 --init-from "$tmp/model.safetensors" > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "$tmp/model.safetensors" "$tmp/err" && [ "$(wc -l < "$tmp/err")" -eq 1 ] || { echo "rc $rc"; cat "$tmp/err"; exit 1; }
echo ok errors
