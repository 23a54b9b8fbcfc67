#!/usr/bin/env bash
# Installs fullshard's build and test dependencies from Debian packages when missing.
# Sourced by tools/demo.sh and tools/test.sh; uses sudo when not root.
set -euo pipefail

fullshard_install_deps() {
  if [ "$(basename "$0")" = "test.sh" ]; then fullshard_install_test_deps; fi  # chromium: test path only
  fullshard_fetch_cudnn_frontend
  local pkgs=(cmake ninja-build g++ libgtest-dev libgmock-dev librapidcheck-dev nlohmann-json3-dev
              libcli11-dev libfmt-dev libgloo-dev libopenblas-dev libbenchmark-dev libicu-dev)
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then return 0; fi
  echo "fullshard: installing ${missing[*]}" >&2
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
}

# The test path only (tools/test.sh): headless Chromium for the plot browser test
# (tests/cli/plot_browser.sh). Optional: when it cannot be installed, that test says it skipped.
fullshard_install_test_deps() {
  if command -v chromium > /dev/null 2>&1 || command -v chromium-browser > /dev/null 2>&1; then return 0; fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "fullshard: installing chromium (for the plot browser test)" >&2
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium; } >&2 ||
    echo "fullshard: could not install chromium; the plot browser test will be skipped" >&2
  return 0
}

# cuDNN's C++ frontend (header-only; NVIDIA/cudnn-frontend, MIT), for the CUDA backend's cuDNN
# attention (NOTE [cuDNN attention on the CUDA backend], backends/cuda/kernels/cudnn_sdpa.cc).
# Debian has no package: its headers come from PyPI's nvidia-cudnn-frontend wheel, unpacked into
# .deps/ (ignored by git), where CMake looks (FULLSHARD_CUDNN_FRONTEND_DIR overrides). Only
# where nvcc and cuDNN's cudnn.h are found; without it the CUDA backend runs its own attention
# kernels for attention = cudnn, so a failed download costs nothing but that.
FULLSHARD_CUDNN_FRONTEND_VERSION=1.32.0
fullshard_fetch_cudnn_frontend() {
  local root dest
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  dest="$root/.deps/cudnn-frontend-$FULLSHARD_CUDNN_FRONTEND_VERSION"
  [ -f "$dest/include/cudnn_frontend.h" ] && return 0
  command -v nvcc > /dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || return 0
  compgen -G "/usr/local/cuda*/include/cudnn.h" > /dev/null || compgen -G "/usr/include/*cudnn.h" > /dev/null ||
    compgen -G "/usr/include/*/cudnn.h" > /dev/null || return 0
  echo "fullshard: fetching cuDNN's C++ frontend headers (PyPI nvidia-cudnn-frontend==$FULLSHARD_CUDNN_FRONTEND_VERSION)" >&2
  local tmp
  tmp="$(mktemp -d)"
  if python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" \
       "nvidia-cudnn-frontend==$FULLSHARD_CUDNN_FRONTEND_VERSION" >&2 &&
     python3 - "$tmp" "$dest" <<'PY'
import pathlib, sys, zipfile
tmp, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(tmp.glob("*.whl"))
staging = dest.with_name(dest.name + ".partial")
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("include/") and not n.endswith("/")]
    if not any(n == "include/cudnn_frontend.h" for n in names):
        sys.exit(f"{wheel.name}: no include/cudnn_frontend.h in the wheel")
    for n in names:
        z.extract(n, staging)
staging.rename(dest)
PY
  then
    echo "fullshard: cuDNN frontend headers in $dest" >&2
  else
    echo "fullshard: could not fetch cuDNN's frontend; attention = cudnn will run fullshard's own kernels" >&2
  fi
  rm -rf "$tmp" "$dest.partial"
  return 0
}
