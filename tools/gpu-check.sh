#!/usr/bin/env bash
# Every GPU check of fullshard in one command (docs/cuda-backend.md, "Running on a GPU machine").
#
#   tools/gpu-check.sh pack [DIR]   on a build machine with CUDA + NCCL (no GPU needed): builds
#                                   Release with the CUDA backend into build-gpu/ and packs the
#                                   fullshard binary, the GPU test binaries and the small non-CUDA
#                                   shared libraries they need into DIR (default build-gpu/pack).
#   tools/gpu-check.sh run [DIR]    on a GPU machine that has the NVIDIA driver and PyTorch's CUDA
#                                   libraries but no Debian packages and no network, from the
#                                   repository root: runs every GPU test, trains tiny Llama and
#                                   GPT-2 (1 rank over NCCL; 2 ranks sharing one GPU over staged
#                                   Gloo) with `fullshard compare` (predicted == measured memory,
#                                   classic and expandable segments), the GPU training benchmark
#                                   beside PyTorch eager + FSDP2, times the kernels of Llama 3.1 8B
#                                   with tools/measure and fits this GPU's profile to them
#                                   (results/measured.csv, results/PROFILE-measured.json), and
#                                   prints one summary.
#   tools/gpu-check.sh all          both, on a machine that builds and has a GPU.
#
# cuBLASLt and NCCL are found through FULLSHARD_CUDA_LIBS (a ':'-separated list of folders);
# without it, through the PyTorch installation of `python3` (site-packages/nvidia/*/lib). The
# CUDA runtime is linked statically; the driver (libcuda.so.1) comes from the machine.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="${1:-all}"
pack="${2:-$root/build-gpu/pack}"

do_pack() {
  set -e
  cd "$root"
  source tools/deps.sh
  fullshard_install_deps
  local build="${FULLSHARD_GPU_BUILD:-$root/build-gpu}"  # an existing build tree may be reused
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${FULLSHARD_GPU_BUILD_TYPE:-Release}" ${CMAKE_ARGS:-} > /dev/null
  cmake --build "$build" --target help | grep -q '^fullshard_cuda:' ||
    { echo "gpu-check: this machine has no nvcc/cuBLASLt/NCCL: the CUDA backend is not built" >&2; exit 2; }
  # Every test binary under tests/gpu first: ctest names a test's command only once its
  # executable exists (on a fresh tree its JSON has no "command").
  cmake --build "$build" --target fullshard tests/gpu/all -j "$(nproc)"
  # The GPU tests, as ctest knows them (label gpu): their executables and arguments.
  local tests_json target_names
  tests_json="$(ctest --test-dir "$build" -L gpu --show-only=json-v1)"
  target_names="$(python3 - "$tests_json" <<'P'
import json, os, sys
tests = json.loads(sys.argv[1]).get("tests", [])
if not tests:
    sys.exit("gpu-check: ctest lists no test labelled gpu")
for t in tests:
    if "command" not in t:
        sys.exit(f"gpu-check: ctest gives no command for {t['name']}: its executable was not built")
    print(os.path.basename(t["command"][0]))
P
)"
  mapfile -t targets <<< "$target_names"
  rm -rf "$pack"
  mkdir -p "$pack/bin" "$pack/lib"
  cp "$build/bin/fullshard" "$pack/bin/"
  for t in "${targets[@]}"; do cp "$build/bin/$t" "$pack/bin/"; done
  strip --strip-debug "$pack"/bin/*
  # name<TAB>binary<TAB>args... of each GPU test (paths inside the build tree are not used).
  python3 - "$tests_json" > "$pack/tests.tsv" <<'P'
import json, os, sys
for t in json.loads(sys.argv[1]).get("tests", []):
    cmd = t["command"]
    print("\t".join([t["name"], os.path.basename(cmd[0])] + cmd[1:]))
P
  # Non-CUDA shared libraries the binaries need that a bare machine lacks (Gloo, fmt, OpenBLAS,
  # their dependencies); never libc, libstdc++ or anything from CUDA / the driver.
  local libs
  libs="$(for b in "$pack"/bin/*; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u |
          grep -v -E '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|libcuda|libnvidia|libcublas|libnccl|libcudart' || true)"
  for l in $libs; do cp -L "$l" "$pack/lib/"; done
  # gfortran and friends that OpenBLAS pulls in indirectly are covered by ldd above.
  # One compressed file travels well (the device tool carries at most 64 MiB); `run` unpacks it.
  tar -C "$(dirname "$pack")" -cJf "$pack.tar.xz" "$(basename "$pack")"
  echo "gpu-check: packed $(du -sh "$pack" | cut -f1) into $pack ($(du -h "$pack.tar.xz" | cut -f1) as $pack.tar.xz)"
}

cuda_lib_path() {
  if [ -n "${FULLSHARD_CUDA_LIBS:-}" ]; then echo "$FULLSHARD_CUDA_LIBS"; return; fi
  python3 - <<'P' 2>/dev/null
import glob, os, site, sys
dirs = []
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
print(":".join(dirs))
P
}

# Results: one line each, printed again at the end.
summary=()
record() { summary+=("$(printf '%-6s %s' "$1" "$2")"); }

do_run() {
  cd "$root"
  if [ ! -x "$pack/bin/fullshard" ] && [ -f "$pack.tar.xz" ]; then
    tar -C "$(dirname "$pack")" -xJf "$pack.tar.xz"
  fi
  [ -x "$pack/bin/fullshard" ] || { echo "gpu-check: no packed binaries in $pack (run: tools/gpu-check.sh pack)" >&2; exit 2; }
  local cudalibs
  cudalibs="$(cuda_lib_path)"
  export LD_LIBRARY_PATH="$pack/lib:${cudalibs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export FULLSHARD_DATA_DIR="$root/scenarios" FULLSHARD_SOURCE_DIR="$root"
  local out="${OUT:-$root/build-gpu/results}"
  mkdir -p "$out"
  local fs="$pack/bin/fullshard"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu-check: GPU /'
  echo "gpu-check: CUDA libraries from ${cudalibs:-<none found>}"
  # 1. GPU tests.
  while IFS=$'\t' read -r name bin args; do
    # shellcheck disable=SC2086
    (cd "$root" && timeout 600 "$pack/bin/$bin" $args) > "$out/test-$name.log" 2>&1
    local rc=$?
    case $rc in
      0) record PASS "test $name" ;;
      77) record SKIP "test $name (no GPU)" ;;
      *) record FAIL "test $name (exit $rc; $out/test-$name.log)"; tail -n 30 "$out/test-$name.log" ;;
    esac
  done < "$pack/tests.tsv"
  # 2. Training with the memory prediction checked, classic and expandable segments.
  for sc in tiny-llama-h100 tiny-gpt2-h100 tiny-llama-h100-2on1; do
    for seg in classic expandable; do
      local file="scenarios/$sc.json"
      if [ "$seg" = expandable ]; then
        python3 - "$file" "$out/$sc-exp.json" <<'P'
import json, sys
s = json.load(open(sys.argv[1]))
s.setdefault("hardware", {}).setdefault("allocator", {})["expandable_segments"] = True
json.dump(s, open(sys.argv[2], "w"))
P
        file="$out/$sc-exp.json"
      fi
      if timeout 600 "$fs" compare "$file" --steps 3 --backend cuda --json "$out/compare-$sc-$seg.json" \
          > "$out/compare-$sc-$seg.log" 2>&1; then
        record PASS "compare $sc ($seg segments): predicted == measured peaks"
      else
        record FAIL "compare $sc ($seg segments) ($out/compare-$sc-$seg.log)"; tail -n 20 "$out/compare-$sc-$seg.log"
      fi
    done
  done
  if timeout 600 "$fs" train scenarios/tiny-llama-h100.json --backend cuda --steps 20 --metrics "$out/tiny-train.jsonl" \
      > "$out/tiny-train.log" 2>&1; then
    record PASS "train tiny-llama-h100: $(grep -m1 '^trained' "$out/tiny-train.log")"
  else
    record FAIL "train tiny-llama-h100 ($out/tiny-train.log)"; tail -n 20 "$out/tiny-train.log"
  fi
  # 3. Benchmark: fullshard and PyTorch eager + FSDP2, same model, batch and AC, back to back.
  local bench=scenarios/llama-1b-h100-bench.json
  if timeout 900 "$fs" train "$bench" --backend cuda --metrics "$out/bench-fullshard.jsonl" > "$out/bench-fullshard.log" 2>&1; then
    record BENCH "fullshard: $(grep -m1 'after the first step' "$out/bench-fullshard.log" | sed 's/^ *//')"
  else
    record FAIL "bench fullshard ($out/bench-fullshard.log)"; tail -n 20 "$out/bench-fullshard.log"
  fi
  if [ -f tools/bench/pytorch_fsdp2_llama.py ]; then
    if timeout 900 python3 tools/bench/pytorch_fsdp2_llama.py --scenario "$bench" --json "$out/bench-pytorch.json" \
        > "$out/bench-pytorch.log" 2>&1; then
      record BENCH "pytorch: $(tail -n 1 "$out/bench-pytorch.log")"
    else
      record FAIL "bench pytorch ($out/bench-pytorch.log)"; tail -n 20 "$out/bench-pytorch.log"
    fi
  fi
  # 4. Measure (docs/cost-model.md, "Measuring a GPU"): the kernels of Llama 3.1 8B at seq 8192
  # timed with PyTorch; FSDP2's hook host time on this machine's CPU (fsdp_hook_s,
  # fsdp_hook_param_s: NOTE [FSDP hook host cost]); and the profile of this GPU fitted to both
  # by `fullshard calibrate`.
  local measured=()
  if [ -f tools/measure/fsdp_hooks.py ]; then
    if timeout 600 python3 tools/measure/fsdp_hooks.py -o "$out/fsdp_hooks.csv" > "$out/fsdp_hooks.log" 2>&1; then
      record MEASURE "fsdp hooks: $(grep -m1 '^fsdp_hook_s' "$out/fsdp_hooks.log") ($out/fsdp_hooks.log)"
      measured+=("$out/fsdp_hooks.csv")
    else
      record FAIL "fsdp hooks ($out/fsdp_hooks.log)"; tail -n 20 "$out/fsdp_hooks.log"
    fi
  fi
  if [ -f tools/measure/measure.py ]; then
    local gpu_name profile
    gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
    case "$gpu_name" in
      *GH200*) profile=gh200 ;; *H200*) profile=h200 ;; *H100*) profile=h100 ;;
      *A100*) profile=a100 ;; *B200*) profile=b200 ;; *) profile=h100 ;;
    esac
    if "$fs" models --json > "$out/models.json" &&
       timeout 900 python3 tools/measure/measure.py --scenario scenarios/llama3.1-8b-fsdp8-h100.json \
         --models-json "$out/models.json" -o "$out/measured.csv" > "$out/measure.log" 2>&1 &&
       "$fs" calibrate "$out/measured.csv" "${measured[@]}" --hardware "$profile" -o "$out/$profile-measured.json" >> "$out/measure.log" 2>&1; then
      record MEASURE "$profile: $(grep -m1 'kernels: typical error' "$out/measure.log" | sed 's/^ *//') ($out/measured.csv, $out/$profile-measured.json)"
    else
      record FAIL "measure ($out/measure.log)"; tail -n 20 "$out/measure.log"
    fi
  fi
  echo
  echo "gpu-check summary:"
  printf '  %s\n' "${summary[@]}"
  printf '%s\n' "${summary[@]}" > "$out/summary.txt"
  ! printf '%s\n' "${summary[@]}" | grep -q '^FAIL'
}

case "$mode" in
  pack) do_pack ;;
  run) do_run ;;
  all) (do_pack) && do_run ;;
  *) echo "usage: tools/gpu-check.sh pack|run|all [DIR]" >&2; exit 2 ;;
esac
