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
# The CPU backend emulates float8 (scenarios/tiny-llama-float8-cpu2.json); the CUDA backend refuses it.
if "$bin" train "$tmp/f8h.json" --backend cuda 2>&1 | grep -qF "built without the CUDA backend"; then
  echo "skip float8-train: this fullshard has no CUDA backend"
else
  expect float8-train "training.float8: is recipe \"rowwise\", which the cuda backend does not run yet" -- train "$tmp/f8h.json" --backend cuda
fi
expect float8-plan "--float8" -- plan --model tiny-llama --gpus 2 --gpus-per-node 2 --gpu a100 --seq-len 32 --float8
cat > "$tmp/hw.json" <<'J'
{"model": "tiny-llama", "training": {"seq_len": 8}, "hardware": {"profile": "h1000", "gpus_per_node": 2}}
J
expect unknown-hardware "h1000" -- simulate "$tmp/hw.json"
expect bad-ranks "--ranks" -- simulate "$src/scenarios/tiny-llama-cpu2.json" --ranks some
expect unknown-flag "--bogus" -- simulate "$src/scenarios/tiny-llama-cpu2.json" --bogus
exit $fail
