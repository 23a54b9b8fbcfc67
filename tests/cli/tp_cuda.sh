#!/usr/bin/env bash
# Tensor parallelism on the CUDA backend: `fullshard train` takes a tp mesh there. Where the
# binary has the CUDA backend and the machine a GPU, the shipped tiny-llama-tp2-h100-4on1 (FSDP 2
# x tp 2, four ranks sharing one GPU over staged Gloo) trains and `fullshard compare` finds the
# simulator's peaks equal to the measured ones; elsewhere the run stops in one line at the
# missing GPU or backend, never at tp. Asynchronous TP stays refused on the CUDA backend.
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0
sc="$src/scenarios/tiny-llama-tp2-h100-4on1.json"
timeout 300 "$bin" train "$sc" --steps 2 > "$tmp/out" 2> "$tmp/err" < /dev/null; rc=$?
if [ "$rc" -eq 0 ]; then
  if grep -q "trained 2 steps" "$tmp/out" &&
     timeout 300 "$bin" compare "$sc" --steps 2 > "$tmp/cmp" 2> "$tmp/cmperr" < /dev/null &&
     grep -q "to the byte on every rank" "$tmp/cmp"; then
    echo "ok   tp trains on the CUDA backend; compare: predicted == measured"
  else
    echo "FAIL tp on the CUDA backend"; cat "$tmp/out" "$tmp/err" "$tmp/cmp" "$tmp/cmperr" 2>/dev/null; fail=1
  fi
elif [ "$rc" -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && ! grep -Eqw "tp|fsdp.mesh.shape" "$tmp/err" &&
     grep -Eq "this machine has no GPU|built without the CUDA backend" "$tmp/err"; then
  echo "ok   no GPU or no CUDA backend here, and tp is not what stops it: $(cat "$tmp/err")"
else
  echo "FAIL train (rc $rc)"; cat "$tmp/out" "$tmp/err"; fail=1
fi
# tensor_parallel.async (which needs model.implementation.compile) stays refused on every real backend.
python3 - "$sc" "$tmp/async.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["tensor_parallel"] = {"async": True}
s["model"] = {"name": s["model"], "implementation": {"compile": True}}
json.dump(s, open(sys.argv[2], "w"))
PY
timeout 120 "$bin" train "$tmp/async.json" --backend cuda --steps 1 > "$tmp/out" 2> "$tmp/err" < /dev/null; rc=$?
# (A build without the CUDA backend stops first, at --backend cuda, in one line too.)
if [ "$rc" -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] &&
   grep -Eq "tensor_parallel.async|built without the CUDA backend" "$tmp/err"; then
  echo "ok   async TP refused on the CUDA backend: $(cat "$tmp/err")"
else
  echo "FAIL async on cuda (rc $rc)"; cat "$tmp/out" "$tmp/err"; fail=1
fi
# And on the CPU backend, which every build has: the same refusal by name.
timeout 120 "$bin" train "$tmp/async.json" --backend cpu --steps 1 > "$tmp/out" 2> "$tmp/err" < /dev/null; rc=$?
if [ "$rc" -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "tensor_parallel.async" "$tmp/err"; then
  echo "ok   async TP refused on the CPU backend: $(cat "$tmp/err")"
else
  echo "FAIL async on cpu (rc $rc)"; cat "$tmp/out" "$tmp/err"; fail=1
fi
exit $fail
