#!/usr/bin/env bash
# Formats C++/CUDA sources with the repository's .clang-format (Google style, 100 columns).
#   tools/format.sh            the files changed against origin/main or HEAD (staged, unstaged, new)
#   tools/format.sh --all      every tracked source file
#   tools/format.sh --check    exit 1 and list the files that are not formatted (changes nothing)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fmt="$(command -v clang-format-14 || command -v clang-format || true)"
if [ -z "$fmt" ]; then
  echo "tools/format.sh: clang-format not found; fix: apt-get install -y clang-format-14" >&2
  exit 2
fi
mode=changed
check=0
for a in "$@"; do
  case "$a" in
    --all) mode=all ;;
    --check) check=1 ;;
    *) echo "tools/format.sh: unknown argument '$a'; fix: use --all and/or --check" >&2; exit 2 ;;
  esac
done
pattern='\.(cc|h|cu|cuh|cpp)$'
if [ "$mode" = all ]; then
  mapfile -t files < <(git ls-files | grep -E "$pattern")
else
  mapfile -t files < <({ git diff --name-only HEAD; git ls-files --others --exclude-standard; } |
                       sort -u | grep -E "$pattern" | while read -r f; do [ -f "$f" ] && echo "$f"; done)
fi
[ "${#files[@]}" -gt 0 ] || exit 0
if [ "$check" = 1 ]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$fmt" --dry-run -Werror "$f" > /dev/null 2>&1; then echo "not formatted: $f"; bad=1; fi
  done
  exit "$bad"
fi
"$fmt" -i "${files[@]}"
