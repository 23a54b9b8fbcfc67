#!/usr/bin/env bash
# Checkpoints of a tensor-parallel run with real worker processes (docs/checkpoints.md):
# dp_shard 2 x tp 2 for 4 steps straight equals 2 steps + --resume 2 steps bit for bit;
# `checkpoint inspect` shows the tp mesh and the placements; the export equals the global
# tensors rebuilt in Python from the pieces' boxes in metadata.json; the checkpoint resumes on
# FSDP 2 without tp, and the export starts a tp run (--init-from). An async save writes the
# same shard files and resumes the same.
set -eu
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
sc="$tmp/tp.json"; fsdp="$tmp/fsdp.json"
python3 - "$src/scenarios/tiny-llama-tp2-cpu4.json" "$sc" "$fsdp" <<'P'
import json, sys
j = json.load(open(sys.argv[1]))
j["training"]["batch_per_rank"] = 2
j["training"]["seq_len"] = 16
json.dump(j, open(sys.argv[2], "w"))
j["fsdp"]["mesh"] = {"shape": [2]}  # the same global batch without tp
j["hardware"]["gpus_per_node"] = 2
json.dump(j, open(sys.argv[3], "w"))
P
"$bin" train "$sc" --steps 4 --metrics "$tmp/straight.jsonl" > /dev/null 2>&1
"$bin" train "$sc" --steps 2 --checkpoint-dir "$tmp/ck" --checkpoint-every 2 --metrics "$tmp/a.jsonl" > /dev/null 2>&1
"$bin" train "$sc" --steps 4 --checkpoint-dir "$tmp/ck" --resume --metrics "$tmp/b.jsonl" > "$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
"$bin" train "$fsdp" --steps 4 --resume "$tmp/ck" --metrics "$tmp/c.jsonl" > "$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
# The asynchronous saver writes the same files: the same resume from an async save.
"$bin" train "$sc" --steps 2 --checkpoint-dir "$tmp/cka" --checkpoint-every 2 --checkpoint-mode async > /dev/null 2>&1
"$bin" train "$sc" --steps 4 --checkpoint-dir "$tmp/cka" --resume --metrics "$tmp/d.jsonl" > "$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
cmp "$tmp/b.jsonl" "$tmp/d.jsonl" > /dev/null || python3 - "$tmp/b.jsonl" "$tmp/d.jsonl" <<'P'
import json, sys
a = [sorted((x["rank"], x["loss"]) for x in json.loads(l)["ranks"]) for l in open(sys.argv[1])]
b = [sorted((x["rank"], x["loss"]) for x in json.loads(l)["ranks"]) for l in open(sys.argv[2])]
assert a == b, (a, b)
P
for f in "$tmp"/ck/step-00000002/*.safetensors; do cmp "$f" "$tmp/cka/step-00000002/$(basename "$f")"; done
python3 - "$tmp/straight.jsonl" "$tmp/a.jsonl" "$tmp/b.jsonl" "$tmp/c.jsonl" <<'P'
import json, sys
rows = [[json.loads(l) for l in open(p)] for p in sys.argv[1:]]
key = lambda ranks: sorted((x["rank"], x["loss"]) for x in ranks)
straight = {r["step"]: key(r["ranks"]) for r in rows[0]}
resumed = rows[1] + rows[2]
assert [r["step"] for r in resumed] == [0, 1, 2, 3], [r["step"] for r in resumed]
for r in resumed:  # every rank's loss, bit for bit
    assert key(r["ranks"]) == straight[r["step"]], (r["step"], r["ranks"], straight[r["step"]])
mean = lambda ranks: sum(x["loss"] for x in ranks) / len(ranks)
assert [r["step"] for r in rows[3]] == [2, 3], [r["step"] for r in rows[3]]
for r in rows[3]:  # FSDP 2 without tp: the same global batch, within fp32 summation order
    a, b = mean(r["ranks"]), mean([x for x in rows[0] if x["step"] == r["step"]][0]["ranks"])
    assert abs(a - b) <= 1e-4 * abs(b), (r["step"], a, b)
P
echo ok resume

"$bin" checkpoint inspect "$tmp/ck" > "$tmp/inspect"
grep -q "saved by 4 ranks: mesh replicate 1 x shard 2 x tp 2; 4 files" "$tmp/inspect"
grep -q "param/layers.0.attention.wq.weight .*_StridedShard(dim=0, sf=2), Shard(0):" "$tmp/inspect"
grep -q "param/layers.0.attention.wo.weight .*Shard(0), Shard(1): \[0:.*, 0:" "$tmp/inspect"
echo ok inspect

"$bin" checkpoint export "$tmp/ck" --safetensors "$tmp/model.safetensors" --names fullshard > /dev/null
python3 - "$tmp/ck/step-00000002" "$tmp/model.safetensors" <<'P'
import json, os, struct, sys
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
folder, model = sys.argv[1:]
meta = json.load(open(os.path.join(folder, "metadata.json")))
files = {f["name"]: read(os.path.join(folder, f["name"])) for f in meta["files"]}
out = read(model)
n = 0
for t in meta["tensors"]:
    if not t["name"].startswith("param/"):
        continue
    shape = t["shape"]; cols = shape[1] if len(shape) > 1 else 1
    whole = bytearray(4 * shape[0] * cols)
    for c in t["chunks"]:  # place every piece by its box
        data = files[c["file"]][t["name"]]
        (r0, c0), (nr, nc) = (c["offsets"] + [0])[:2], (c["lengths"] + [1])[:2]
        for r in range(nr):
            at = 4 * ((r0 + r) * cols + c0)
            whole[at:at + 4 * nc] = data[4 * r * nc:4 * (r + 1) * nc]
    assert out[t["name"][6:]] == bytes(whole), t["name"]
    n += 1
assert n == 21, n
P
echo ok export

"$bin" train "$sc" --steps 1 --init-from "$tmp/model.safetensors" > "$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
echo ok init-from
