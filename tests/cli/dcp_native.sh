#!/usr/bin/env bash
# fullshard's checkpoints and PyTorch's torch.distributed.checkpoint in DCP's own format (a
# pickled .metadata and __<rank>_0.distcp files of torch.save archives; docs/checkpoints.md
# "DCP's own format", tools/interop/dcp_interop.py --format dcp), both directions:
#  1. fullshard trains tiny-llama on 4 ranks, FSDP 2 x tp 2, and exports its checkpoint with
#     --dcp: 4 .distcp files, 74 chunks (strided Shard(0) row boxes, Shard(1) column boxes,
#     replicated norms written once; NOTE [Strided pieces of tensor-parallel weights]); a
#     PyTorch FSDP2 model over 3 Gloo ranks (uneven shards, so every rank reads across
#     fullshard's pieces) loads it with dcp.load + FileSystemReader, bit for bit equal to
#     fullshard's own safetensors export of the same checkpoint.
#  2. PyTorch FSDP2 over 3 ranks saves with dcp.save + FileSystemWriter; fullshard starts from the
#     folder on 2 ranks (--init-from), trains one step at lr 0 (the weights stay), and its
#     exported weights equal PyTorch's gathered parameters bit for bit.
# Skips (77) where the Python ($FULLSHARD_TORCH_PYTHON, default python3) lacks torch or
# safetensors, as on CI.
set -eu
bin="$1"; src="$2"
py="${FULLSHARD_TORCH_PYTHON:-python3}"
"$py" -c "import safetensors, torch.distributed.checkpoint as d; d.FileSystemReader" 2> /dev/null \
  || { echo "no torch with torch.distributed.checkpoint (and safetensors) in $py: skipped"; exit 77; }
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
tool="$src/tools/interop/dcp_interop.py"
port=$((20000 + RANDOM % 20000))

"$bin" train "$src/scenarios/tiny-llama-tp2-cpu4.json" --steps 1 --checkpoint-dir "$tmp/ck" --checkpoint-every 1 \
  > "$tmp/train.out" 2>&1 || { cat "$tmp/train.out"; exit 1; }
"$bin" checkpoint export "$tmp/ck" --dcp "$tmp/dcp" > "$tmp/export.out"
grep -q "exported 21 tensors (74 chunks" "$tmp/export.out" || { cat "$tmp/export.out"; exit 1; }
test -f "$tmp/dcp/.metadata" && test -f "$tmp/dcp/__3_0.distcp"
"$bin" checkpoint export "$tmp/ck" --safetensors "$tmp/ref.safetensors" > /dev/null
"$py" "$tool" load "$tmp/dcp" --format dcp --reference "$tmp/ref.safetensors" --world 3 --port "$port"

"$py" "$tool" save "$tmp/pt" --format dcp --reference "$tmp/pt.safetensors" --world 3 --port "$((port + 1))"
python3 - "$src/scenarios/tiny-llama-cpu2.json" "$tmp/lr0.json" <<'P'
import json, sys
j = json.load(open(sys.argv[1])); j.pop("$schema", None); j["name"] = "lr0"
j["training"]["optimizer"].update(lr=0.0, weight_decay=0.0)  # AdamW leaves the weights as loaded
json.dump(j, open(sys.argv[2], "w"))
P
"$bin" train "$tmp/lr0.json" --init-from "$tmp/pt" --steps 1 --checkpoint-dir "$tmp/ck0" --checkpoint-every 1 \
  > "$tmp/train0.out" 2>&1 || { cat "$tmp/train0.out"; exit 1; }
"$bin" checkpoint export "$tmp/ck0" --safetensors "$tmp/back.safetensors" > /dev/null
"$py" "$tool" compare "$tmp/pt.safetensors" "$tmp/back.safetensors"

# Errors: a .metadata that is not DCP's, one line naming the file and the opcode or class.
printf '\x80\x02cos\nsystem\nq\x00.' > "$tmp/pt/.metadata"
if "$bin" train "$tmp/lr0.json" --init-from "$tmp/pt" --steps 1 > "$tmp/bad.out" 2>&1; then
  echo "a hostile .metadata was accepted"; exit 1
fi
grep -q "pt/.metadata: pickle global 'os.system' at byte 2 is not a class this file may hold" "$tmp/bad.out" \
  || { cat "$tmp/bad.out"; exit 1; }
if "$bin" checkpoint export "$tmp/ck" > "$tmp/noout.out" 2>&1; then echo "export without an output"; exit 1; fi
grep -q "add --safetensors OUT.safetensors or --dcp FOLDER" "$tmp/noout.out" || { cat "$tmp/noout.out"; exit 1; }
echo ok
