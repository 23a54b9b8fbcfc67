#!/usr/bin/env bash
# fullshard's checkpoints and PyTorch's torch.distributed.checkpoint in DCP's own format (a
# pickled .metadata and __<rank>_0.distcp files of torch.save archives; docs/checkpoints.md
# "DCP's own format", tools/interop/dcp_interop.py --format dcp), both directions:
#  0. (without torch) AdamW's state exported with --dcp and started from with --init-from gives
#     the step a --resume of the fullshard checkpoint gives, byte for byte (and --model-only's
#     export does not); --resume of a DCP folder: a one-line error pointing to --init-from.
#  1. fullshard trains tiny-llama on 4 ranks, FSDP 2 x tp 2, and exports its checkpoint with
#     --dcp: 4 .distcp files, 74 chunks (strided Shard(0) row boxes, Shard(1) column boxes,
#     replicated norms written once; NOTE [Strided pieces of tensor-parallel weights]); a
#     PyTorch FSDP2 model over 3 Gloo ranks (uneven shards, so every rank reads across
#     fullshard's pieces) loads it with dcp.load + FileSystemReader, bit for bit equal to
#     fullshard's own safetensors export of the same checkpoint.
#  2. PyTorch FSDP2 over 3 ranks saves with dcp.save + FileSystemWriter; fullshard starts from the
#     folder on 2 ranks (--init-from), trains one step at lr 0 (the weights stay), and its
#     exported weights equal PyTorch's gathered parameters bit for bit.
#  3. AdamW's state, fullshard -> PyTorch: tiny-llama on 2 ranks (weight decay 0.1) trains 2
#     steps; export --dcp adds get_optimizer_state_dict's keys; PyTorch FSDP2 over 3 ranks (the
#     default layout) and over 2 (flatten_optimizer_state_dict=True) loads model + optimizer
#     into an AdamW built with wrong hyperparameters: the param group and step 2 come from the
#     checkpoint. One more step with zero gradients on both sides (fullshard: resumed with
#     max_grad_norm 1e-30, which scales the gradients below fp32's reach) gives the same
#     parameters within 1e-6 and 4 ulps of max(|p|, lr) (docs/checkpoints.md "Optimizer state": PyTorch's CPU
#     lerp_ fuses a multiply-add that fullshard rounds twice, and addcdiv_ multiplies first).
#  4. AdamW's state, PyTorch -> fullshard: FSDP2 over 3 ranks takes 2 AdamW steps on random
#     gradients and saves model + optimizer; fullshard --init-from on 2 ranks continues at AdamW
#     step 3, and one zero-gradient step matches PyTorch's within 1e-6 and 4 ulps of max(|p|, lr).
# Skips (77) where the Python ($FULLSHARD_TORCH_PYTHON, default python3) lacks torch or
# safetensors, as on CI.
set -eu
bin="$1"; src="$2"
py="${FULLSHARD_TORCH_PYTHON:-python3}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT

# 0. Without torch (runs on CI): AdamW's state through DCP's format and back into fullshard. Two
#    steps saved, exported with --dcp; one zero-gradient step from it (--init-from) equals one
#    from the fullshard checkpoint (--resume) byte for byte, at AdamW step 3 on both.
python3 - "$src/scenarios/tiny-llama-cpu2.json" "$tmp/wd.json" "$tmp/zero.json" <<'P'
import json, sys
j = json.load(open(sys.argv[1])); j.pop("$schema", None); j["name"] = "wd"
j["training"]["optimizer"].update(weight_decay=0.1)
json.dump(j, open(sys.argv[2], "w"))
j["training"]["optimizer"].update(max_grad_norm=1e-30)  # gradients ~1e-30 x g/|g|: m, v see zero
json.dump(j, open(sys.argv[3], "w"))
P
"$bin" train "$tmp/wd.json" --steps 2 --checkpoint-dir "$tmp/ck2" --checkpoint-every 2 > "$tmp/t2.out" 2>&1 \
  || { cat "$tmp/t2.out"; exit 1; }
"$bin" checkpoint export "$tmp/ck2" --dcp "$tmp/dcp2" > "$tmp/export2.out"
grep -q "and AdamW's state at step 2: 63 tensors" "$tmp/export2.out" || { cat "$tmp/export2.out"; exit 1; }
"$bin" train "$tmp/zero.json" --steps 3 --resume "$tmp/ck2/step-00000002" --checkpoint-dir "$tmp/ck3" \
  --checkpoint-every 3 > "$tmp/t3.out" 2>&1 || { cat "$tmp/t3.out"; exit 1; }
"$bin" train "$tmp/zero.json" --steps 1 --init-from "$tmp/dcp2" --checkpoint-dir "$tmp/ck3d" \
  --checkpoint-every 1 > "$tmp/t3d.out" 2>&1 || { cat "$tmp/t3d.out"; exit 1; }
for c in ck3 ck3d; do
  "$bin" checkpoint inspect "$tmp/$c" | grep -q "AdamW steps 3" || { "$bin" checkpoint inspect "$tmp/$c"; exit 1; }
  "$bin" checkpoint export "$tmp/$c" --safetensors "$tmp/$c.safetensors" > /dev/null
done
cmp "$tmp/ck3.safetensors" "$tmp/ck3d.safetensors"
# The same from the parameters alone (--model-only): a fresh AdamW, and other parameters.
"$bin" checkpoint export "$tmp/ck2" --dcp "$tmp/dcp2m" --model-only > "$tmp/export2m.out"
if grep -q "AdamW" "$tmp/export2m.out"; then echo "--model-only exported optimizer state"; exit 1; fi
"$bin" train "$tmp/zero.json" --steps 1 --init-from "$tmp/dcp2m" --checkpoint-dir "$tmp/ck3m" \
  --checkpoint-every 1 > "$tmp/t3m.out" 2>&1 || { cat "$tmp/t3m.out"; exit 1; }
"$bin" checkpoint inspect "$tmp/ck3m" | grep -q "AdamW steps 1" || { "$bin" checkpoint inspect "$tmp/ck3m"; exit 1; }
"$bin" checkpoint export "$tmp/ck3m" --safetensors "$tmp/ck3m.safetensors" > /dev/null
if cmp -s "$tmp/ck3.safetensors" "$tmp/ck3m.safetensors"; then echo "the optimizer state changed nothing"; exit 1; fi
if "$bin" train "$tmp/zero.json" --steps 3 --resume "$tmp/dcp2" > "$tmp/resume.out" 2>&1; then
  echo "--resume of a DCP folder was accepted"; exit 1
fi
grep -q "is a torch.distributed.checkpoint folder (.metadata), not a fullshard checkpoint; start from it with --init-from" \
  "$tmp/resume.out" || { cat "$tmp/resume.out"; exit 1; }

"$py" -c "import safetensors, torch.distributed.checkpoint as d; d.FileSystemReader" 2> /dev/null \
  || { echo "no torch with torch.distributed.checkpoint (and safetensors) in $py: skipped the PyTorch parts"; exit 77; }
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

# 3. AdamW's state, fullshard -> PyTorch (the checkpoints of part 0).
opt=(--format dcp --optim --weight-decay 0.1)
"$bin" checkpoint export "$tmp/ck2" --safetensors "$tmp/ref2.safetensors" > /dev/null
"$py" "$tool" load "$tmp/dcp2" "${opt[@]}" --reference "$tmp/ref2.safetensors" --expect-step 2 \
  --after "$tmp/pt_after.safetensors" --world 3 --port "$((port + 2))"
"$py" "$tool" load "$tmp/dcp2" "${opt[@]}" --flat --reference "$tmp/ref2.safetensors" --expect-step 2 \
  --after "$tmp/pt_after_flat.safetensors" --world 2 --port "$((port + 3))"
"$py" "$tool" compare "$tmp/pt_after.safetensors" "$tmp/pt_after_flat.safetensors"
"$py" "$tool" compare "$tmp/pt_after.safetensors" "$tmp/ck3.safetensors" --atol 1e-6 --ulps 4 --ulp-floor 1e-3

# 4. AdamW's state, PyTorch -> fullshard.
"$py" "$tool" save "$tmp/pt2" "${opt[@]}" --steps 2 --after "$tmp/pt2_after.safetensors" --world 3 \
  --port "$((port + 4))"
"$bin" train "$tmp/zero.json" --init-from "$tmp/pt2" --steps 1 --checkpoint-dir "$tmp/ck4" --checkpoint-every 1 \
  > "$tmp/t4.out" 2>&1 || { cat "$tmp/t4.out"; exit 1; }
"$bin" checkpoint inspect "$tmp/ck4" | grep -q "AdamW steps 3" || { "$bin" checkpoint inspect "$tmp/ck4"; exit 1; }
"$bin" checkpoint export "$tmp/ck4" --safetensors "$tmp/fs2_after.safetensors" > /dev/null
"$py" "$tool" compare "$tmp/pt2_after.safetensors" "$tmp/fs2_after.safetensors" --atol 1e-6 --ulps 4 --ulp-floor 1e-3
# With a frozen parameter the optimizer state is not loaded: the run starts AdamW at step 0.
python3 - "$tmp/zero.json" "$tmp/frozen.json" <<'P'
import json, sys
j = json.load(open(sys.argv[1])); j["name"] = "frozen"; j["training"]["frozen"] = ["norm.weight"]
json.dump(j, open(sys.argv[2], "w"))
P
"$bin" train "$tmp/frozen.json" --init-from "$tmp/pt2" --steps 1 --checkpoint-dir "$tmp/ck5" --checkpoint-every 1 \
  > "$tmp/t5.out" 2>&1 || { cat "$tmp/t5.out"; exit 1; }
"$bin" checkpoint inspect "$tmp/ck5" | grep -q "AdamW steps 1" || { "$bin" checkpoint inspect "$tmp/ck5"; exit 1; }

# Errors: optimizer state of another shape, one line naming the key.
"$py" "$tool" save "$tmp/pt3" "${opt[@]}" --steps 1 --after "$tmp/pt3_after.safetensors" --world 2 \
  --port "$((port + 5))" --sgd
if "$bin" train "$tmp/zero.json" --init-from "$tmp/pt3" --steps 1 > "$tmp/sgd.out" 2>&1; then
  echo "SGD's state was accepted as AdamW's"; exit 1
fi
grep -q "pt3: 'state.model.embed_tokens.weight.momentum_buffer': is 'momentum_buffer', not AdamW's state" "$tmp/sgd.out" \
  || { cat "$tmp/sgd.out"; exit 1; }
test "$(grep -c . "$tmp/sgd.out")" = 1 || { cat "$tmp/sgd.out"; exit 1; }

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
