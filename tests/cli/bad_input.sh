#!/usr/bin/env bash
# Bad input: one line on stderr naming the path/flag, the value and the fix; exit code 2;
# no stack trace, no crash.
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # expect NAME SUBSTRING -- ARGS...
  local name="$1" want="$2"; shift 3
  "$bin" "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  local lines; lines=$(wc -l < "$tmp/err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL $name: rc=$rc lines=$lines stderr:"; cat "$tmp/err"; fail=1
  else
    echo "ok   $name: $(cat "$tmp/err")"
  fi
}
expect missing-file "no-such.json" -- simulate "$tmp/no-such.json"
printf '{"model": "tiny-llama",\n "training": {"seq_len": 8,}\n}' > "$tmp/malformed.json"
expect malformed-json "malformed.json" -- simulate "$tmp/malformed.json"
cat > "$tmp/typo.json" <<'J'
{"model": "tiny-llama", "training": {"seq_lenn": 8}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}
J
expect misspelled-field "seq_len" -- simulate "$tmp/typo.json"
cat > "$tmp/neg.json" <<'J'
{"model": "tiny-llama", "training": {"seq_len": -8}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}
J
expect negative-size "training.seq_len" -- simulate "$tmp/neg.json"
cat > "$tmp/mesh.json" <<'J'
{"model": "tiny-llama", "training": {"seq_len": 8}, "fsdp": {"mesh": {"shape": [3]}}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}
J
expect mesh-product "fsdp.mesh.shape" -- simulate "$tmp/mesh.json"
cat > "$tmp/raf.json" <<'J'
{"model": "tiny-llama", "training": {"seq_len": 8}, "fsdp": {"reshard_after_forward": 3, "mesh": {"shape": [4]}}, "hardware": {"profile": "cpu", "gpus_per_node": 4}}
J
expect raf-divides "fsdp.reshard_after_forward" -- simulate "$tmp/raf.json"
cat > "$tmp/model.json" <<'J'
{"model": "llama9-1t", "training": {"seq_len": 8}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}
J
expect unknown-model "llama9-1t" -- simulate "$tmp/model.json"
# training.float8 (docs/float8.md): refused on a GPU without float8 rates, and by the real backends.
cat > "$tmp/f8.json" <<'J'
{"model": "tiny-llama", "training": {"seq_len": 32, "steps": 1, "float8": {"recipe": "rowwise"}}, "fsdp": {"mesh": {"shape": [2]}}, "hardware": {"profile": "a100", "gpus_per_node": 2}}
J
expect float8-a100 "no float8 tensor cores" -- simulate "$tmp/f8.json"
sed 's/"a100"/"h100"/' "$tmp/f8.json" > "$tmp/f8h.json"
# The CPU backend emulates float8 (scenarios/tiny-llama-float8-cpu2.json); the CUDA backend runs
# tensorwise only (its float8 GEMM takes no per-row scales yet).
if "$bin" train "$tmp/f8h.json" --backend cuda 2>&1 | grep -qF "built without the CUDA backend"; then
  echo "skip float8-train: this fullshard has no CUDA backend"
else
  expect float8-train "training.float8.recipe: is \"rowwise\", whose per-row scales the CUDA backend's float8 GEMM does not take yet" -- train "$tmp/f8h.json" --backend cuda
fi
expect float8-plan "--float8" -- plan --model tiny-llama --gpus 2 --gpus-per-node 2 --gpu a100 --seq-len 32 --float8
# Frozen parameters and LoRA (model.lora, training.frozen, training.frozen_dtype).
lora() {  # lora NAME WANT MODEL_LORA TRAINING_EXTRA FSDP_EXTRA
  printf '{"model": {"name": "tiny-llama"%s}, "training": {"seq_len": 8%s}, "fsdp": {"mesh": {"shape": [2]}, "mixed_precision": {"param_dtype": "bf16"}%s}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}' \
    "$3" "$4" "$5" > "$tmp/lora-$1.json"
  expect "lora-$1" "$2" -- simulate "$tmp/lora-$1.json"
}
lora rank "model.lora.rank" ', "lora": {"rank": 0, "alpha": 16, "target_modules": ["q_proj"]}' '' ''
lora alpha "model.lora.alpha" ', "lora": {"rank": 4, "alpha": -1, "target_modules": ["q_proj"]}' '' ''
lora target "model.lora.target_modules[1]" ', "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "qproj"]}' '' ''
lora target-twice "given twice" ', "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "q_proj"]}' '' ''
lora target-empty "model.lora.target_modules" ', "lora": {"rank": 4, "alpha": 8, "target_modules": []}' '' ''
lora missing-alpha "model.lora" ', "lora": {"rank": 4, "target_modules": ["q_proj"]}' '' ''
lora unknown-field "model.lora" ', "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj"], "dropout": 0.1}' '' ''
lora frozen-nomatch "training.frozen[0]" '' ', "frozen": ["layers.*.attention.wq.weigth"]' ''
lora frozen-all "freezes every parameter" '' ', "frozen": ["*"]' ''
lora frozen-type "training.frozen" '' ', "frozen": "tok_embeddings.weight"' ''
lora frozen-dtype "training.frozen_dtype" '' ', "frozen": ["tok_embeddings.weight"], "frozen_dtype": "int8"' ''
lora frozen-dtype-mp "training.frozen_dtype" '' ', "frozen": ["tok_embeddings.weight"], "frozen_dtype": "fp16"' ''
lora frozen-dtype-alone "training.frozen_dtype: is set but no parameter is frozen" '' ', "frozen_dtype": "bf16"' ''
lora compile "model.lora: is set with model.implementation.compile" ', "implementation": {"compile": true}, "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj"]}' '' ''
lora float8 "model.lora: is set with training.float8" ', "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj"]}' ', "float8": {"recipe": "tensorwise"}' ''
# Original parameters in bf16 (training.orig_dtype, NOTE [Original dtype]).
lora orig-dtype "training.orig_dtype" '' ', "orig_dtype": "fp16"' ''
lora orig-dtype-compile "training.orig_dtype: is \"bf16\" with model.implementation.compile" ', "implementation": {"compile": true}' ', "orig_dtype": "bf16"' ''
lora orig-dtype-float8 "training.orig_dtype: is \"bf16\" with training.float8" '' ', "orig_dtype": "bf16", "float8": {"recipe": "tensorwise"}' ''
lora orig-dtype-frozen "training.frozen_dtype: is \"fp32\" but fsdp.mixed_precision.param_dtype is bf16" '' ', "orig_dtype": "bf16", "frozen": ["output.weight"], "frozen_dtype": "fp32"' ''
# fsdp.ignored_params (NOTE [What ignored parameters compose with] in scenario_ignored.cc).
lora ignored-nomatch "fsdp.ignored_params[0]" '' ', "frozen": ["output.weight"], "frozen_dtype": "bf16"' ', "ignored_params": ["output.weigth"]'
lora ignored-all "fsdp.ignored_params: ignores every parameter" '' '' ', "ignored_params": ["*"]'
lora ignored-type "fsdp.ignored_params: is \"output.weight\" (a string), not a list" '' '' ', "ignored_params": "output.weight"'
lora ignored-trainable "a trainable parameter" '' '' ', "ignored_params": ["output.weight"]'
lora ignored-dtype "F.linear refuses mixed dtypes" '' ', "frozen": ["output.weight"]' ', "ignored_params": ["output.weight"]'
lora ignored-compile "fsdp.ignored_params: is set with model.implementation.compile" ', "implementation": {"compile": true}' ', "frozen": ["output.weight"], "frozen_dtype": "bf16"' ', "ignored_params": ["output.weight"]'
cat > "$tmp/ignored.json" <<'J'
{"model": "tiny-llama", "training": {"seq_len": 8, "frozen": ["output.weight"]}, "fsdp": {"mesh": {"shape": [2]}, "ignored_params": ["output.weight"]}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}
J
expect ignored-checkpoint "--checkpoint-every: is given with fsdp.ignored_params" -- train "$tmp/ignored.json" --checkpoint-every 1 --checkpoint-dir "$tmp/ckpt"
sed 's/"shape": \[2\]}/"shape": [1, 2], "dim_names": ["shard", "tp"]}/' "$tmp/ignored.json" > "$tmp/ignored-tp.json"
expect ignored-tp "fsdp.ignored_params: is set with a tp mesh dim" -- simulate "$tmp/ignored-tp.json"
cat > "$tmp/orig-tp.json" <<'J'
{"model": "tiny-llama", "training": {"seq_len": 8, "orig_dtype": "bf16"}, "fsdp": {"mesh": {"shape": [1, 2], "dim_names": ["shard", "tp"]}}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}
J
expect orig-dtype-tp "training.orig_dtype: is \"bf16\" with a tp mesh dim" -- simulate "$tmp/orig-tp.json"
cat > "$tmp/lora-gpt2.json" <<'J'
{"model": {"name": "tiny-gpt2", "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj"]}}, "training": {"seq_len": 8}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}
J
expect lora-gpt2 "model.lora: is set for a GPT-2 model" -- simulate "$tmp/lora-gpt2.json"
cat > "$tmp/lora-fp32.json" <<'J'
{"model": {"name": "tiny-llama", "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj"]}}, "training": {"seq_len": 8}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}
J
expect lora-base-dtype "training.frozen_dtype: is \"bf16\" (model.lora's default)" -- simulate "$tmp/lora-fp32.json"
cat > "$tmp/lora-tp.json" <<'J'
{"model": {"name": "tiny-llama", "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj"]}}, "training": {"seq_len": 8, "frozen_dtype": "fp32"}, "fsdp": {"mesh": {"shape": [1, 2], "dim_names": ["shard", "tp"]}}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}
J
expect lora-tp "model.lora: is set with a tp mesh dim" -- simulate "$tmp/lora-tp.json"
cat > "$tmp/lora-moe.json" <<'J'
{"model": {"name": "tiny-moe", "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj"]}}, "training": {"seq_len": 8}, "fsdp": {"mesh": {"shape": [2]}, "mixed_precision": {"param_dtype": "bf16"}}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}
J
expect lora-moe "model.lora: is set with a mixture-of-experts model" -- simulate "$tmp/lora-moe.json"
cat > "$tmp/lora-cp.json" <<'J'
{"model": {"name": "tiny-llama", "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj"]}}, "training": {"seq_len": 32}, "fsdp": {"mesh": {"shape": [1, 2], "dim_names": ["shard", "cp"]}, "mixed_precision": {"param_dtype": "bf16"}}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}
J
expect lora-cp "model.lora: is set with a cp mesh dim" -- simulate "$tmp/lora-cp.json"
cat > "$tmp/lora-pp.json" <<'J'
{"model": {"name": "tiny-llama", "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj"]}}, "training": {"seq_len": 32, "batch_per_rank": 2}, "fsdp": {"mesh": {"shape": [2, 1], "dim_names": ["pp", "shard"]}, "mixed_precision": {"param_dtype": "bf16"}}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}
J
expect lora-pp "model.lora: is set with a pp mesh dim" -- simulate "$tmp/lora-pp.json"
cat > "$tmp/hw.json" <<'J'
{"model": "tiny-llama", "training": {"seq_len": 8}, "hardware": {"profile": "h1000", "gpus_per_node": 2}}
J
expect unknown-hardware "h1000" -- simulate "$tmp/hw.json"
expect bad-ranks "--ranks" -- simulate "$src/scenarios/tiny-llama-cpu2.json" --ranks some
expect unknown-flag "--bogus" -- simulate "$src/scenarios/tiny-llama-cpu2.json" --bogus
# DeepSeek-V3 (docs/models.md, "Multi-head latent attention"; docs/moe.md, the expert bias):
# groups that do not divide the experts; a misspelt load_balance; MLA with rotate-half RoPE.
cat > "$tmp/dsv3.json" <<'J'
{"model": {"name": "deepseek-v3-16b", "moe": {"num_expert_groups": 3}}, "training": {"seq_len": 64}, "fsdp": {"mesh": {"shape": [8]}}, "hardware": {"profile": "h100-sxm-80gb", "gpus_per_node": 8}}
J
expect dsv3-groups "model.moe.num_expert_groups: is 3" -- simulate "$tmp/dsv3.json"
cat > "$tmp/dsv3-lb.json" <<'J'
{"model": {"name": "deepseek-v3-16b", "moe": {"load_balance": "off"}}, "training": {"seq_len": 64}, "fsdp": {"mesh": {"shape": [8]}}, "hardware": {"profile": "h100-sxm-80gb", "gpus_per_node": 8}}
J
expect dsv3-load-balance "model.moe.load_balance" -- simulate "$tmp/dsv3-lb.json"
cat > "$tmp/mla-rope.json" <<'J'
{"model": {"name": "tiny-deepseek", "implementation": {"rope": "rotate_half"}}, "training": {"seq_len": 8}, "fsdp": {"mesh": {"shape": [2]}}, "hardware": {"profile": "cpu", "gpus_per_node": 2}}
J
expect mla-rotate-half "model.implementation.rope" -- simulate "$tmp/mla-rope.json"
exit $fail
