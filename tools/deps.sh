#!/usr/bin/env bash
# Installs fullshard's build and test dependencies from Debian packages when missing.
# Sourced by tools/demo.sh and tools/test.sh; uses sudo when not root.
set -euo pipefail

fullshard_install_deps() {
  if [ "$(basename "$0")" = "test.sh" ]; then fullshard_install_test_deps; fi  # chromium: test path only
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
