#!/usr/bin/env bash
# Every GPU check of fullshard (docs/cuda-backend.md, "Running on a GPU machine").
#
#   tools/gpu-check.sh pack [DIR]     on a build machine with CUDA + NCCL (no GPU needed): builds
#                                     Release with the CUDA backend into build-gpu/ and packs the
#                                     fullshard binary, the GPU test binaries and the small non-CUDA
#                                     shared libraries they need into DIR (default build-gpu/pack)
#                                     and DIR.tar.xz.
#   tools/gpu-check.sh quick          on a GPU machine, from a pack: the one command for a short GPU
#                                     lease (NOTE [GPU check quick]): every GPU test case as its own
#                                     process beside the nine compares, the 1B benchmark beside
#                                     PyTorch eager + FSDP2 (own and cuDNN attention) with the per-op
#                                     table, the GPU microbenchmarks (cuda_*_bench targets); one
#                                     summary, under 8 minutes.
#   tools/gpu-check.sh run [STAGE..]  on a GPU machine that has the NVIDIA driver and PyTorch's CUDA
#                                     libraries but no Debian packages and no network, from the
#                                     repository root, the stages named (default: all, in order):
#       tests    every GPU test binary;
#       sanitize the tensor-core attention test under compute-sanitizer racecheck and synccheck;
#       compare  tiny Llama and GPT-2 (1 rank over NCCL; 2 ranks sharing one GPU over staged Gloo;
#                FSDP 2 x tp 2 as 4 ranks sharing one GPU), and tiny Llama under each
#                model.implementation variant (1 rank)
#                with `fullshard compare` (predicted == measured peaks, classic and expandable
#                segments), then 20 steps of `fullshard train`;
#       bench    the GPU training benchmark beside PyTorch eager + FSDP2, and the simulator's
#                prediction of PyTorch's peak memory for it;
#       bench_cudnn  the same with attention = cudnn on both sides (cuDNN's fused attention);
#       measure  PyTorch's cuBLAS workspaces, FSDP2's hook time, the kernels of Llama 3.1 8B timed
#                with tools/measure and this GPU's profile fitted to them.
#   tools/gpu-check.sh all            pack, then run every stage, on a machine that builds and has
#                                     a GPU.
#
# NOTE [GPU check in stages]: a lent GPU machine runs one command for at most 10 minutes and
# returns at most 8 files from $OUT. So each stage fits one call (every step has its own short
# timeout: a hang costs minutes, not the call), results go to $OUT/summary.txt line by line as
# they come, and the logs of every step are re-packed into $OUT/logs.tar.gz after each step: a
# call killed at its limit still returns what it had done. Without $OUT, build-gpu/results.
#
# The packed binaries (FULLSHARD_GPU_PACK, default build-gpu/pack; DIR.tar.xz is unpacked when
# DIR is missing) find cuBLASLt, NCCL, cuDNN and NVRTC through FULLSHARD_CUDA_LIBS (a ':'-separated list of
# folders); without it, through the PyTorch installation of `python3` (site-packages/nvidia/*/lib).
# Only fullshard's own binaries get that library path: PyTorch's Python runs with its own. The
# CUDA runtime is linked statically; the driver (libcuda.so.1) comes from the machine.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="${1:-all}"
if [ "$mode" = pack ]; then pack="${2:-$root/build-gpu/pack}"; else pack="${FULLSHARD_GPU_PACK:-$root/build-gpu/pack}"; fi

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
  # GPU microbenchmarks (targets named cuda_*_bench), run by the quick stage.
  local benches
  benches="$(cmake --build "$build" --target help | sed -n 's/^\(cuda_[A-Za-z0-9_]*_bench\):.*/\1/p')"
  if [ -n "$benches" ]; then
    # shellcheck disable=SC2086
    cmake --build "$build" --target $benches -j "$(nproc)"
    for t in $benches; do cp "$build/bin/$t" "$pack/bin/"; done
  fi
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
          grep -v -E '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|libcuda|libnvidia|libcublas|libnccl|libcudart|libcudnn|libnvrtc' || true)"
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

# Results: one line each, written to $results/summary.txt as they come and printed at the end.
summary=()
results=""
work=""
record() {
  local line
  line="$(printf '%-7s %s' "$1" "$2")"
  summary+=("$line")
  echo "gpu-check: $line"
  [ -n "$results" ] && printf '%s\n' "$line" >> "$results/summary.txt"
  save_logs
}
# One archive of every log, refreshed after each step (NOTE [GPU check in stages]).
save_logs() {
  [ -n "$results" ] && [ "$results" != "$work" ] || return 0
  tar -C "$(dirname "$work")" -czf "$results/logs.tar.gz.tmp" "$(basename "$work")" 2> /dev/null &&
    mv "$results/logs.tar.gz.tmp" "$results/logs.tar.gz"
}

# fullshard's binaries with their libraries; stdin from /dev/null (a test loop reads its list).
fsrun() { env LD_LIBRARY_PATH="$fs_libs" "$@" < /dev/null; }

stage_tests() {
  while IFS=$'\t' read -r name bin args; do
    # shellcheck disable=SC2086
    timeout -k 10 "${GPU_CHECK_TEST_TIMEOUT:-150}" env LD_LIBRARY_PATH="$fs_libs" "$pack/bin/$bin" $args \
      > "$work/test-$name.log" 2>&1 < /dev/null
    local rc=$?
    case $rc in
      0) record PASS "test $name" ;;
      77) record SKIP "test $name (no GPU)" ;;
      124|137) record FAIL "test $name (timed out; test-$name.log)"; tail -n 30 "$work/test-$name.log" ;;
      *) record FAIL "test $name (exit $rc; test-$name.log)"; tail -n 30 "$work/test-$name.log" ;;
    esac
  done < "$pack/tests.tsv"
  # NOTE [Not ready is not an error] in backends/cuda/cuda_error.h: what this runtime does.
  grep -h "NotReady" "$work"/test-*.log 2> /dev/null | head -n 1 | sed 's/^/gpu-check: /'
}

# Its own stage: compute-sanitizer slows kernels by one or two orders of magnitude, and the tests
# stage alone fills much of a 10-minute call.
stage_sanitize() {
  # The tensor-core attention kernels under compute-sanitizer's race and barrier checkers, on the
  # small shapes of one test (a race that a given run does not show would pass the test itself).
  local sanitizer
  sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null || true)"
  for tool in racecheck synccheck; do
    if [ -z "$sanitizer" ]; then record SKIP "compute-sanitizer $tool (not installed)"; continue; fi
    if timeout -k 10 "${GPU_CHECK_TEST_TIMEOUT:-150}" env LD_LIBRARY_PATH="$fs_libs" "$sanitizer" --tool "$tool" \
        --error-exitcode 1 "$pack/bin/cuda_kernels_test" --gtest_filter=CudaKernels.AttentionTensorCoresMatchCpu \
        > "$work/sanitizer-$tool.log" 2>&1 < /dev/null; then
      record PASS "compute-sanitizer $tool: tensor-core attention"
    else
      record FAIL "compute-sanitizer $tool: tensor-core attention (sanitizer-$tool.log)"; tail -n 20 "$work/sanitizer-$tool.log"
    fi
  done
}

stage_compare() {
  local fs="$pack/bin/fullshard"
  for sc in tiny-llama-h100 tiny-gpt2-h100 tiny-llama-h100-2on1 tiny-llama-tp2-h100-4on1; do
    for seg in classic expandable; do
      local file="scenarios/$sc.json"
      if [ "$seg" = expandable ]; then
        python3 - "$file" "$work/$sc-exp.json" <<'P'
import json, sys
s = json.load(open(sys.argv[1]))
s.setdefault("hardware", {}).setdefault("allocator", {})["expandable_segments"] = True
json.dump(s, open(sys.argv[2], "w"))
P
        file="$work/$sc-exp.json"
      fi
      if timeout -k 10 "${GPU_CHECK_COMPARE_TIMEOUT:-180}" env LD_LIBRARY_PATH="$fs_libs" "$fs" compare "$file" \
          --steps 3 --backend cuda --json "$work/compare-$sc-$seg.json" > "$work/compare-$sc-$seg.log" 2>&1 < /dev/null; then
        record PASS "compare $sc ($seg segments): predicted == measured peaks"
      else
        record FAIL "compare $sc ($seg segments) (compare-$sc-$seg.log)"; tail -n 20 "$work/compare-$sc-$seg.log"
      fi
    done
  done
  # How the model is coded (docs/scenario-format.md, model.implementation): every variant runs
  # its own kernels on the CUDA backend (eager decompositions, efficient / cuDNN attention
  # layouts, compiled blocks, bf16 logits); 1 rank over NCCL, classic segments.
  local variants=(
    'hf-transformers:{"preset": "hf-transformers"}'
    'torchtitan-2024-04:{"preset": "torchtitan-2024-04"}'
    'torchtitan:{"preset": "torchtitan"}'
    'efficient:{"attention": "efficient", "gqa": "repeat_kv"}'
    'cudnn:{"attention": "cudnn"}'
    'compile:{"compile": true}'
    'bf16-logits:{"loss": "bf16_logits"}'
  )
  for v in "${variants[@]}"; do
    local vname="${v%%:*}" vjson="${v#*:}" vfile="$work/tiny-llama-$vname.json"
    python3 - scenarios/tiny-llama-h100.json "$vfile" "$vjson" <<'P'
import json, sys
s = json.load(open(sys.argv[1]))
s["model"] = {"name": s["model"]} if isinstance(s["model"], str) else s["model"]
s["model"]["implementation"] = json.loads(sys.argv[3])
json.dump(s, open(sys.argv[2], "w"))
P
    if timeout -k 10 "${GPU_CHECK_COMPARE_TIMEOUT:-180}" env LD_LIBRARY_PATH="$fs_libs" "$fs" compare "$vfile" \
        --steps 3 --backend cuda --json "$work/compare-impl-$vname.json" > "$work/compare-impl-$vname.log" 2>&1 < /dev/null; then
      record PASS "compare tiny-llama-h100 implementation $vname: predicted == measured peaks"
      # A call cuDNN declines says so on stderr (NOTE [cuDNN attention on the CUDA backend]).
      while read -r l; do record NOTE "$vname: $l"; done < <(grep -m2 'cuDNN attention' "$work/compare-impl-$vname.log")
    else
      record FAIL "compare tiny-llama-h100 implementation $vname (compare-impl-$vname.log)"
      tail -n 20 "$work/compare-impl-$vname.log"
    fi
  done
  # attention = cudnn on fullshard's own flash kernels (FULLSHARD_CUDNN_ATTENTION=off), beside cuDNN's.
  if timeout -k 10 "${GPU_CHECK_COMPARE_TIMEOUT:-180}" env LD_LIBRARY_PATH="$fs_libs" FULLSHARD_CUDNN_ATTENTION=off \
      "$fs" compare "$work/tiny-llama-cudnn.json" --steps 3 --backend cuda --json "$work/compare-impl-cudnn-off.json" \
      > "$work/compare-impl-cudnn-off.log" 2>&1 < /dev/null; then
    record PASS "compare tiny-llama-h100 implementation cudnn, FULLSHARD_CUDNN_ATTENTION=off: predicted == measured peaks"
  else
    record FAIL "compare tiny-llama-h100 implementation cudnn, own kernels (compare-impl-cudnn-off.log)"
    tail -n 20 "$work/compare-impl-cudnn-off.log"
  fi
  if timeout -k 10 "${GPU_CHECK_COMPARE_TIMEOUT:-180}" env LD_LIBRARY_PATH="$fs_libs" "$fs" train \
      scenarios/tiny-llama-h100.json --backend cuda --steps 20 --metrics "$work/tiny-train.jsonl" \
      > "$work/tiny-train.log" 2>&1 < /dev/null; then
    record PASS "train tiny-llama-h100: $(grep -m1 '^trained' "$work/tiny-train.log")"
  else
    record FAIL "train tiny-llama-h100 (tiny-train.log)"; tail -n 20 "$work/tiny-train.log"
  fi
  # The same without the timing events (NOTE [Measured stream times on the GPU]): their cost on
  # a host-bound tiny model, beside the run above.
  if timeout -k 10 "${GPU_CHECK_COMPARE_TIMEOUT:-180}" env LD_LIBRARY_PATH="$fs_libs" FULLSHARD_CUDA_STREAM_TIMES=off \
      "$fs" train scenarios/tiny-llama-h100.json --backend cuda --steps 20 > "$work/tiny-train-untimed.log" 2>&1 \
      < /dev/null; then
    record PASS "train tiny-llama-h100 without timing events: $(grep -m1 '^trained' "$work/tiny-train-untimed.log")"
  else
    record FAIL "train tiny-llama-h100 without timing events (tiny-train-untimed.log)"
    tail -n 20 "$work/tiny-train-untimed.log"
  fi
}

# fullshard and PyTorch eager + FSDP2, same model, batch and AC, back to back; then the
# simulator's peak for the scenario beside PyTorch's measured one. NAME tags the files.
bench_pair() {
  local name="$1" bench="$2" fs="$pack/bin/fullshard"
  if timeout -k 10 "${GPU_CHECK_BENCH_TIMEOUT:-270}" env LD_LIBRARY_PATH="$fs_libs" "$fs" train "$bench" \
      --backend cuda --metrics "$work/$name-fullshard.jsonl" > "$work/$name-fullshard.log" 2>&1 < /dev/null; then
    record BENCH "$name fullshard: $(grep -m1 'after the first step' "$work/$name-fullshard.log" | sed 's/^ *//')"
    while read -r l; do record NOTE "$name: $l"; done < <(grep -m2 'cuDNN attention' "$work/$name-fullshard.log")
  else
    record FAIL "$name fullshard ($name-fullshard.log)"; tail -n 20 "$work/$name-fullshard.log"
  fi
  if timeout -k 10 "${GPU_CHECK_BENCH_TIMEOUT:-270}" env PYTHONUNBUFFERED=1 python3 tools/bench/pytorch_fsdp2_llama.py \
      --scenario "$bench" --json "$work/$name-pytorch.json" > "$work/$name-pytorch.log" 2>&1 < /dev/null; then
    record BENCH "$name pytorch: $(tail -n 1 "$work/$name-pytorch.log")"
    if fsrun "$fs" simulate "$bench" --json "$work/$name-predicted.json" > "$work/$name-predicted.log" 2>&1; then
      record MEMORY "$(python3 - "$work/$name-predicted.json" "$work/$name-pytorch.json" "$name" <<'P'
import json, sys
pred = json.load(open(sys.argv[1]))["rank_classes"][0]
meas = json.load(open(sys.argv[2]))
line = []
for key, name in (("peak_allocated_bytes", "max_memory_allocated"), ("peak_reserved_bytes", "max_memory_reserved")):
    p, m = pred[key], meas[name]
    line.append(f"{name}: predicted {p} B, PyTorch {m} B ({(p - m) / 2**20:+.1f} MiB)")
print(f"{sys.argv[3]}, simulator vs PyTorch: " + "; ".join(line))
P
)"
    else
      record FAIL "simulate $bench ($name-predicted.log)"
    fi
  else
    record FAIL "$name pytorch ($name-pytorch.log)"; tail -n 20 "$work/$name-pytorch.log"
  fi
}

stage_bench() { bench_pair bench scenarios/llama-1b-h100-bench.json; }

# The same benchmark with attention = cudnn on both sides: cuDNN's fused attention in fullshard
# (NOTE [cuDNN attention on the CUDA backend]) and PyTorch's SDPBackend.CUDNN_ATTENTION.
stage_bench_cudnn() {
  python3 - scenarios/llama-1b-h100-bench.json "$work/llama-1b-h100-bench-cudnn.json" <<'P'
import json, sys
s = json.load(open(sys.argv[1]))
s["name"] += "-cudnn"
s["model"]["implementation"] = {"attention": "cudnn"}
json.dump(s, open(sys.argv[2], "w"))
P
  bench_pair bench-cudnn "$work/llama-1b-h100-bench-cudnn.json"
}

# docs/cost-model.md, "Measuring a GPU": PyTorch's cuBLAS workspaces (NOTE [cuBLAS workspaces]);
# FSDP2's hook host time (NOTE [FSDP hook host cost]); the kernels of Llama 3.1 8B at seq 8192
# timed with PyTorch, and this GPU's profile fitted to them and the hooks by `fullshard calibrate`.
stage_measure() {
  local fs="$pack/bin/fullshard" measured=()
  if timeout -k 10 120 env PYTHONUNBUFFERED=1 python3 tools/measure/blas_workspace.py --json "$work/blas_workspace.json" \
      > "$work/blas_workspace.log" 2>&1 < /dev/null; then
    record MEASURE "$(grep -m1 '^blas_workspace_bytes' "$work/blas_workspace.log")"
  else
    record FAIL "cuBLAS workspaces (blas_workspace.log): $(tail -n 1 "$work/blas_workspace.log")"
  fi
  if timeout -k 10 200 env PYTHONUNBUFFERED=1 python3 tools/measure/fsdp_hooks.py -o "$work/fsdp_hooks.csv" \
      > "$work/fsdp_hooks.log" 2>&1 < /dev/null; then
    record MEASURE "fsdp hooks: $(grep -m1 '^fsdp_hook_s' "$work/fsdp_hooks.log")"
    measured+=("$work/fsdp_hooks.csv")
  else
    record FAIL "fsdp hooks (fsdp_hooks.log)"; tail -n 20 "$work/fsdp_hooks.log"
  fi
  local gpu_name profile
  gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
  case "$gpu_name" in
    *GH200*) profile=gh200 ;; *H200*) profile=h200 ;; *H100*) profile=h100 ;;
    *A100*) profile=a100 ;; *B200*) profile=b200 ;; *) profile=h100 ;;
  esac
  if fsrun "$fs" models --json > "$work/models.json" &&
     timeout -k 10 "${GPU_CHECK_MEASURE_TIMEOUT:-420}" env PYTHONUNBUFFERED=1 python3 tools/measure/measure.py \
       --scenario scenarios/llama3.1-8b-fsdp8-h100.json --models-json "$work/models.json" -o "$work/measured.csv" \
       > "$work/measure.log" 2>&1 < /dev/null &&
     fsrun "$fs" calibrate "$work/measured.csv" "${measured[@]}" --hardware "$profile" \
       -o "$work/$profile-measured.json" >> "$work/measure.log" 2>&1; then
    record MEASURE "$profile: $(grep -m1 'kernels: typical error' "$work/measure.log" | sed 's/^ *//') ($profile-measured.json)"
    [ "$results" != "$work" ] && cp "$work/$profile-measured.json" "$work/measured.csv" "$results/"
  else
    record FAIL "measure (measure.log)"; tail -n 20 "$work/measure.log"
  fi
}

# NOTE [GPU check quick]: one command for a short GPU lease (the machine's start and 15 minutes
# of device time in all): every GPU test case as its own process (a sticky CUDA error or a hang
# costs one case, not a binary), several at once beside the nine compares (pp 2 and cp 2 among
# them), then on the idle GPU
# the 1B benchmark beside PyTorch eager + FSDP2 (default attention, then cuDNN) with the per-op
# table, then the GPU microbenchmarks (pack/bin/cuda_*_bench). A step starts only while the
# budget (GPU_CHECK_QUICK_BUDGET seconds from the stage's start, default 450) leaves it room.
quick_left() { echo $(( quick_deadline - $(date +%s) )); }

# One gtest case in its own process: "NAME<TAB>BINARY<TAB>FILTER<TAB>ARGS" on stdin's line.
quick_case() {
  local name bin filter args
  IFS=$'\t' read -r name bin filter args <<< "$1"
  local log="$work/case-$name-${filter//[^A-Za-z0-9_.]/_}.log"
  # shellcheck disable=SC2086
  timeout -k 5 "${GPU_CHECK_CASE_TIMEOUT:-120}" env LD_LIBRARY_PATH="$fs_libs" "$pack/bin/$bin" $args \
    --gtest_filter="$filter" > "$log" 2>&1 < /dev/null
  local rc=$?
  case $rc in
    0) echo "ok $name $filter" ;;
    77) echo "skip $name $filter" ;;
    124|137) echo "FAIL $name $filter (timed out after ${GPU_CHECK_CASE_TIMEOUT:-120} s; $(basename "$log"))" ;;
    *) echo "FAIL $name $filter (exit $rc; $(basename "$log")): $(grep -m1 -E 'Failure|error|Expected' "$log" | cut -c1-200)" ;;
  esac
}

quick_tests() {
  local cases="$work/cases.tsv"
  : > "$cases"
  : > "$work/benches.tsv"
  while IFS=$'\t' read -r name bin args; do
    # A benchmark registered as a GPU test (bench_attention) times the idle GPU later.
    case "$bin" in *bench*) printf '%s\t%s\t%s\n' "$name" "$bin" "$args" >> "$work/benches.tsv"; continue ;; esac
    # gtest's list: "Suite." lines, then "  Case" lines (a value-parameterised case has a comment).
    # shellcheck disable=SC2086
    timeout -k 5 60 env LD_LIBRARY_PATH="$fs_libs" "$pack/bin/$bin" $args --gtest_list_tests \
        > "$work/list-$name.txt" 2>&1 < /dev/null
    local rc=$?
    if [ $rc -eq 77 ]; then echo "skip $name (no GPU)" >> "$work/case-results.txt"; continue; fi
    if [ $rc -ne 0 ]; then echo "FAIL $name (cannot list its tests: exit $rc; list-$name.txt)" >> "$work/case-results.txt"; continue; fi
    awk -v n="$name" -v b="$bin" -v a="$args" 'BEGIN { OFS = "\t" }
      /^[^ ]/ { suite = $1; next }
      /^  / { print n, b, suite $1, a }' "$work/list-$name.txt" >> "$cases"
  done < "$pack/tests.tsv"
  export -f quick_case
  export work pack fs_libs
  tr '\n' '\0' < "$cases" | xargs -0 -P "${GPU_CHECK_PARALLEL:-4}" -I{} bash -c 'quick_case "$1"' _ {} \
    >> "$work/case-results.txt"
}

quick_compares() {
  local fs="$pack/bin/fullshard"
  python3 - scenarios/tiny-llama-h100.json "$work/tiny-llama-h100-exp.json" <<'P'
import json, sys
s = json.load(open(sys.argv[1]))
s.setdefault("hardware", {}).setdefault("allocator", {})["expandable_segments"] = True
s["name"] += "-exp"
json.dump(s, open(sys.argv[2], "w"))
P
  # Mixture of experts (docs/moe.md; never run on a GPU before): tiny-moe's 2 ranks share the GPU
  # over staged Gloo, at ep 1 and at ep 2 (the token all-to-all-v staged through pinned memory).
  python3 - scenarios/tiny-moe-fsdp2-h100.json "$work/tiny-moe-ep2-h100-2on1.json" <<'P'
import json, sys
s = json.load(open(sys.argv[1]))
s["expert_parallel"] = {"degree": 2}
s["name"] = "tiny-moe-ep2-h100-2on1"
json.dump(s, open(sys.argv[2], "w"))
P
  # Pipeline parallelism (pp 2 x FSDP 2, 1F1B: the stage handoffs as staged Gloo broadcasts over
  # each channel's own group) and context parallelism (cp 2 x FSDP 2, ring attention passing K / V:
  # context_parallel.cu's ring rounds, merge and row adds) on the 4 ranks of tiny-llama-tp2's
  # mesh sharing the GPU (docs/pipeline.md, docs/context-parallel.md; never run on a GPU before).
  python3 - scenarios/tiny-llama-tp2-h100-4on1.json "$work" <<'P'
import json, sys
base = json.load(open(sys.argv[1]))
pp = json.loads(json.dumps(base))
pp["name"] = "tiny-llama-pp2-h100-4on1"
pp["fsdp"]["mesh"]["dim_names"] = ["pp", "dp_shard"]
pp["pipeline_parallel"] = {"schedule": "1F1B", "microbatch_size": 2}
json.dump(pp, open(f"{sys.argv[2]}/tiny-llama-pp2-h100-4on1.json", "w"))
cp = json.loads(json.dumps(base))
cp["name"] = "tiny-llama-cp2-h100-4on1"
cp["fsdp"]["mesh"]["dim_names"] = ["dp_shard", "cp"]
cp["context_parallel"] = {"rotate_method": "alltoall"}
json.dump(cp, open(f"{sys.argv[2]}/tiny-llama-cp2-h100-4on1.json", "w"))
P
  for file in scenarios/tiny-llama-h100.json "$work/tiny-llama-h100-exp.json" scenarios/tiny-gpt2-h100.json \
              scenarios/tiny-llama-h100-2on1.json scenarios/tiny-llama-tp2-h100-4on1.json \
              scenarios/tiny-moe-fsdp2-h100.json "$work/tiny-moe-ep2-h100-2on1.json" \
              "$work/tiny-llama-pp2-h100-4on1.json" "$work/tiny-llama-cp2-h100-4on1.json"; do
    local sc
    sc="$(basename "$file" .json)"
    if timeout -k 10 "${GPU_CHECK_COMPARE_TIMEOUT:-180}" env LD_LIBRARY_PATH="$fs_libs" "$fs" compare "$file" \
        --steps 3 --backend cuda --json "$work/compare-$sc.json" > "$work/compare-$sc.log" 2>&1 < /dev/null; then
      echo "PASS compare $sc: $(grep -m1 'ok:' "$work/compare-$sc.log" | sed 's/^ *//')"
    else
      echo "FAIL compare $sc (compare-$sc.log): $(tail -n 1 "$work/compare-$sc.log" | cut -c1-200)"
    fi
  done > "$work/compare-results.txt"
}

# The measured report's per-op table (NOTE [Per-op times]): the classes with the most
# measured time, and where measured and predicted differ most.
quick_op_table() {
  python3 - "$1" <<'P' 2>/dev/null
import json, sys
try:
    rep = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(0)
steps = rep.get("ops_per_step") or []
table = steps[-1].get("ops", []) if steps else []
if not table:
    sys.exit(0)
key = lambda r: r.get("measured_s", 0)
for r in sorted(table, key=key, reverse=True)[:12]:
    name = f'{r.get("key")} ({r.get("kind")})'
    m, p = r.get("measured_s", 0), r.get("predicted_s") or 0
    print(f"{name}: calls {r.get('calls', '?')}, measured {m * 1e3:.2f} ms, predicted {p * 1e3:.2f} ms"
          + (f" ({m / p:.2f}x)" if p else ""))
P
}

quick_bench() {
  local name="$1" bench="$2" fs="$pack/bin/fullshard"
  local t0
  t0=$(date +%s)
  # Each output line stamped with the seconds since the process started: step 1's line says
  # how long start-up (parameter init included) took.
  local t0ns
  t0ns=$(date +%s%N)
  if timeout -k 10 "$(( $(quick_left) - 30 ))" env LD_LIBRARY_PATH="$fs_libs" "$fs" train "$bench" --backend cuda \
      --metrics "$work/$name-fullshard.jsonl" --json "$work/$name-fullshard.json" 2>&1 < /dev/null |
      while IFS= read -r l; do printf '[%6.2f s] %s\n' "$(( $(date +%s%N) - t0ns ))e-9" "$l"; done > "$work/$name-fullshard.log" &&
      [ "${PIPESTATUS[0]}" -eq 0 ] && grep -q 'after the first' "$work/$name-fullshard.log"; then
    record BENCH "$name fullshard: $(grep -m1 'after the first' "$work/$name-fullshard.log" | sed 's/^\[[^]]*\] *//') [process $(( $(date +%s) - t0 )) s]"
    record START "$name fullshard: step 1 done $(grep -m1 'step 1/' "$work/$name-fullshard.log" | cut -d']' -f1 | tr -d '[') after the process started"
    while read -r l; do record OPS "$name: $l"; done < <(quick_op_table "$work/$name-fullshard.json")
    while read -r l; do record NOTE "$name: $l"; done < <(grep -m3 -i 'cudnn attention\|attention calls by path' "$work/$name-fullshard.log")
  else
    record FAIL "$name fullshard ($name-fullshard.log): $(tail -n 1 "$work/$name-fullshard.log" | cut -c1-200)"
  fi
  [ "$(quick_left)" -gt 60 ] || { record SKIP "$name pytorch (quick budget spent)"; return; }
  if timeout -k 10 "$(( $(quick_left) - 20 ))" env PYTHONUNBUFFERED=1 python3 tools/bench/pytorch_fsdp2_llama.py \
      --scenario "$bench" --json "$work/$name-pytorch.json" > "$work/$name-pytorch.log" 2>&1 < /dev/null; then
    record BENCH "$name pytorch: $(tail -n 1 "$work/$name-pytorch.log")"
    python3 - "$work/$name-fullshard.json" "$work/$name-pytorch.json" "$name" > "$work/$name-ratio.txt" 2>/dev/null <<'P'
import json, sys
fs, pt = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
f = fs["tokens_per_s_per_gpu"] * fs.get("world_size", 1)
print(f"{sys.argv[3]}: fullshard {f:.0f} tok/s, PyTorch {pt['tokens_per_s']:.0f} tok/s: {f / pt['tokens_per_s']:.2f}x")
P
    [ -s "$work/$name-ratio.txt" ] && record RATIO "$(cat "$work/$name-ratio.txt")"
  else
    record FAIL "$name pytorch ($name-pytorch.log)"; tail -n 5 "$work/$name-pytorch.log"
  fi
}

stage_quick() {
  quick_deadline=$(( $(date +%s) + ${GPU_CHECK_QUICK_BUDGET:-450} ))
  : > "$work/case-results.txt"
  quick_tests &
  local tests_pid=$!
  quick_compares
  while read -r l; do record "${l%% *}" "${l#* }"; done < "$work/compare-results.txt"
  wait "$tests_pid"
  local ok skip
  ok=$(grep -c '^ok ' "$work/case-results.txt"); skip=$(grep -c '^skip ' "$work/case-results.txt")
  record TESTS "$ok GPU test cases passed, $skip skipped, $(grep -c '^FAIL' "$work/case-results.txt") failed (each its own process)"
  while read -r l; do record FAIL "${l#FAIL }"; done < <(grep '^FAIL' "$work/case-results.txt")
  quick_bench bench scenarios/llama-1b-h100-bench.json
  if [ "$(quick_left)" -gt 90 ]; then
    python3 - scenarios/llama-1b-h100-bench.json "$work/llama-1b-h100-bench-cudnn.json" <<'P'
import json, sys
s = json.load(open(sys.argv[1]))
s["name"] += "-cudnn"
s["model"]["implementation"] = {"attention": "cudnn"}
json.dump(s, open(sys.argv[2], "w"))
P
    quick_bench bench-cudnn "$work/llama-1b-h100-bench-cudnn.json"
  else
    record SKIP "bench-cudnn (quick budget spent)"
  fi
  # The microbenchmarks on the idle GPU: the GPU-test ones with their ctest arguments, then
  # every other packed cuda_*_bench.
  local benches=()
  while IFS=$'\t' read -r _ bin args; do benches+=("$bin $args"); done < "$work/benches.tsv"
  for b in "$pack"/bin/cuda_*_bench; do [ -x "$b" ] && benches+=("$(basename "$b")"); done
  for cmd in "${benches[@]}"; do
    local bn="${cmd%% *}"
    [ "$(quick_left)" -gt 20 ] || { record SKIP "$bn (quick budget spent)"; continue; }
    # shellcheck disable=SC2086
    if timeout -k 5 "$(( $(quick_left) - 10 ))" env LD_LIBRARY_PATH="$fs_libs" "$pack/bin/"$cmd > "$work/$bn.log" 2>&1 < /dev/null; then
      while read -r l; do record KERNEL "$bn: $l"; done < <(grep -E 'ratio|GB/s|TFLOP|cuDNN' "$work/$bn.log" | head -n 16)
    else
      record FAIL "$bn ($bn.log): $(tail -n 1 "$work/$bn.log" | cut -c1-200)"
    fi
  done
}

do_run() {
  cd "$root"
  local stages=("$@")
  [ ${#stages[@]} -gt 0 ] || stages=(tests sanitize compare bench bench_cudnn measure)
  for st in "${stages[@]}"; do
    case "$st" in quick|tests|sanitize|compare|bench|bench_cudnn|measure) ;; *)
      echo "gpu-check: unknown stage '$st': name quick, tests, sanitize, compare, bench, bench_cudnn or measure" >&2; exit 2 ;;
    esac
  done
  if [ ! -x "$pack/bin/fullshard" ] && [ -f "$pack.tar.xz" ]; then
    tar -C "$(dirname "$pack")" -xJf "$pack.tar.xz"
  fi
  [ -x "$pack/bin/fullshard" ] || { echo "gpu-check: no packed binaries in $pack (run: tools/gpu-check.sh pack)" >&2; exit 2; }
  local cudalibs
  cudalibs="$(cuda_lib_path)"
  fs_libs="$pack/lib${cudalibs:+:$cudalibs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export FULLSHARD_DATA_DIR="$root/scenarios" FULLSHARD_SOURCE_DIR="$root"
  # Two ranks as threads on one GPU: 12 streams, more than the default 8 hardware queues, could
  # put one rank's staged-Gloo gate ahead of the other's copies in a shared queue.
  export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
  work="$root/build-gpu/results"
  results="${OUT:-$work}"
  mkdir -p "$work" "$results"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu-check: GPU /' |
    tee -a "$work/machine.txt"
  echo "gpu-check: CUDA libraries from ${cudalibs:-<none found>}; stages: ${stages[*]}" | tee -a "$work/machine.txt"
  # Shared libraries the binaries need and this machine lacks (cuDNN, NVRTC, cuBLASLt, NCCL come
  # from PyTorch's wheels): said once, up front, rather than as every step's failure.
  local missing
  missing="$(for b in "$pack"/bin/*; do env LD_LIBRARY_PATH="$fs_libs" ldd "$b" 2>/dev/null; done |
             awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')"
  [ -z "$missing" ] || record FAIL "shared libraries not found (set FULLSHARD_CUDA_LIBS to their folders): $missing"
  for st in "${stages[@]}"; do "stage_$st"; done
  echo
  echo "gpu-check summary:"
  printf '  %s\n' "${summary[@]}"
  [ "$results" = "$work" ] && printf '%s\n' "${summary[@]}" > "$work/summary.txt"
  save_logs
  ! printf '%s\n' "${summary[@]}" | grep -q '^FAIL'
}

case "$mode" in
  pack) do_pack ;;
  run) shift; do_run "$@" ;;
  quick) do_run quick ;;
  all) (do_pack) && do_run ;;
  *) echo "usage: tools/gpu-check.sh pack [DIR] | quick | run [quick|tests|sanitize|compare|bench|bench_cudnn|measure ...] | all" >&2
     exit 2 ;;
esac
