#!/usr/bin/env bash
# fullshard's weights and PyTorch's torch.distributed.checkpoint, both directions, with no custom
# code on either side (tools/interop/dcp_interop.py, docs/checkpoints.md "PyTorch's DCP"):
#  1. fullshard trains and exports a checkpoint as Hugging Face safetensors; a PyTorch FSDP2 model
#     over 3 Gloo ranks (not fullshard's 2: uneven shards) loads it with dcp.load +
#     HuggingFaceStorageReader, bit for bit.
#  2. PyTorch FSDP2 over 2 ranks saves with dcp.save + HuggingFaceStorageWriter (each rank its
#     shards, consolidated by DCP); fullshard starts from it (--init-from), trains one step at
#     lr 0 (the weights stay), and its exported checkpoint equals PyTorch's files bit for bit.
# Skips (77) where the Python ($FULLSHARD_TORCH_PYTHON, default python3) lacks torch with DCP's
# Hugging Face storage or safetensors, as on CI.
set -eu
bin="$1"; src="$2"
py="${FULLSHARD_TORCH_PYTHON:-python3}"
"$py" -c "import safetensors, torch.distributed.checkpoint as d; d.HuggingFaceStorageReader" 2> /dev/null \
  || { echo "no torch with DCP's Hugging Face storage (and safetensors) in $py: skipped"; exit 77; }
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
tool="$src/tools/interop/dcp_interop.py"
port=$((20000 + RANDOM % 20000))

"$bin" train "$src/scenarios/tiny-llama-cpu2.json" --steps 2 --checkpoint-dir "$tmp/ck" --checkpoint-every 2 \
  > "$tmp/train.out" 2>&1 || { cat "$tmp/train.out"; exit 1; }
"$bin" checkpoint export "$tmp/ck" --safetensors "$tmp/hf" --max-shard-size 100000 > /dev/null
"$py" "$tool" load "$tmp/hf" --world 3 --port "$port"

"$py" "$tool" save "$tmp/pt" --world 2 --files 3 --port "$((port + 1))"
python3 - "$src/scenarios/tiny-llama-cpu2.json" "$tmp/lr0.json" <<'P'
import json, sys
j = json.load(open(sys.argv[1])); j.pop("$schema", None); j["name"] = "lr0"
j["training"]["optimizer"].update(lr=0.0, weight_decay=0.0)  # AdamW leaves the weights as loaded
json.dump(j, open(sys.argv[2], "w"))
P
"$bin" train "$tmp/lr0.json" --init-from "$tmp/pt" --steps 1 --checkpoint-dir "$tmp/ck0" --checkpoint-every 1 \
  > "$tmp/train0.out" 2>&1 || { cat "$tmp/train0.out"; exit 1; }
"$bin" checkpoint export "$tmp/ck0" --safetensors "$tmp/back.safetensors" > /dev/null
"$py" "$tool" compare "$tmp/pt" "$tmp/back.safetensors"
echo ok
