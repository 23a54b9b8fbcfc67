#!/usr/bin/env bash
# README.md and docs/*.md name only repository paths that exist (issue 29 item 4): a path that
# starts with a top-level folder (core/ simulator/ backends/ runner/ tools/ tests/ scenarios/
# docs/ cmake/ .ci/) and every Markdown link target (tests/cli/doc_paths_check.py says what
# counts). First the checker runs on a small tree with one mistake of each kind and must print
# exactly those; then on the source tree, where it must find none.
set -u
src="$2"
check="$src/tests/cli/doc_paths_check.py"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$tmp/t/core/sub" "$tmp/t/docs" "$tmp/t/tools" "$tmp/t/tests"
touch "$tmp/t/core/a.h" "$tmp/t/core/sub/b.cc" "$tmp/t/core/sub/c.cc" "$tmp/t/tests/c.cc" \
      "$tmp/t/tools/run.sh"
cat > "$tmp/t/README.md" <<'EOF'
Good: `core/a.h`, the folder core/sub/, core/sub/b.cc:12, (tools/run.sh).
Bad: core/b.cc has moved.
Bad, one of a brace pair: core/a.{h,cc}.
Skipped: core/*.h, scenarios/<name>.json, core/X/y.h, tests/N.sh, $D/core/q.h, core/...
Another repository's: torchtitan/docs/performance.md, pytorch/tools/autograd/x.yaml.
Written: `fullshard calibrate m.csv -o scenarios/hardware/new.json`, run > docs/out.md.
Links: [good](docs/guide.md#top), [bad](docs/gone.md), [web](https://x.org/core/zz), [a](#anchor).
EOF
cat > "$tmp/t/docs/guide.md" <<'EOF'
Links relative to docs/: [good](../README.md), [bad](sub/b.cc).
A folder that is gone: simulator/cost/.
Two files of that name: tools/c.cc.
EOF
python3 "$check" "$tmp/t" > "$tmp/out" 2>&1 && { cat "$tmp/out"; fail "the checker passed a tree with mistakes"; }
generic="name a path that exists, drop it, or write another repository's file with that repository in front (torchtitan/docs/...)"
cat > "$tmp/want" <<EOF
README.md:2: core/b.cc does not exist; fix: write core/sub/b.cc
README.md:3: core/a.cc does not exist; fix: $generic
README.md:7: docs/gone.md does not exist; fix: $generic
docs/guide.md:1: sub/b.cc does not exist; fix: write ../core/sub/b.cc
docs/guide.md:2: simulator/cost/ does not exist; fix: $generic
docs/guide.md:3: tools/c.cc does not exist; fix: one of core/sub/c.cc, tests/c.cc
2 documents, 6 paths that do not exist
EOF
diff "$tmp/want" "$tmp/out" || fail "the checker's report on the test tree differs (- wanted, + got)"

python3 "$check" "$src" || fail "README.md or docs/*.md name paths that do not exist (one per line above)"
