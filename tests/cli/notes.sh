#!/usr/bin/env bash
# NOTE blocks as specs (issue 29 item 6): every title a comment refers to is defined exactly once,
# and a reference's pointer (" in path/file.h" or " (file.h)") names the file that holds it
# (tests/cli/notes_check.py says what counts as what). First the checker runs on a small tree with
# one mistake of each kind, wrapped over two lines in each language, and must print exactly
# those; then on the source tree, where it must find none. It prints how many NOTE blocks are
# over 16 lines (a warning; `python3 tests/cli/notes_check.py . --list-long` lists them).
set -u
src="$2"
check="$src/tests/cli/notes_check.py"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
n='NOTE'  # so that this script names no title itself
mkdir -p "$tmp/t/core" "$tmp/t/docs" "$tmp/t/tools" "$tmp/t/tests"
cat > "$tmp/t/core/alpha.h" <<EOF
// A header.
// $n [Alpha title]: what holds,
// and why.
int x;  // a reference in the same file: $n [Alpha title].
EOF
cat > "$tmp/t/core/beta.cc" <<EOF
// Good: wrapped between the marker and the title, pointer on the next line: see $n
// [Alpha title] in
// core/alpha.h.
// $n [Beta]
// The title alone on its line defines it too.
// Bad: a title wrapped over two lines that is defined nowhere: $n [Gamma
// delta].
EOF
cat > "$tmp/t/core/kernel.cu" <<EOF
// Bad pointer, wrapped: $n [Beta] (alpha.h): the base name of the wrong file.
// Good: $n [Alpha
// title] (alpha.h).
EOF
cat > "$tmp/t/CMakeLists.txt" <<EOF
# Bad, wrapped: $n [Alpha title] in
# core/beta.cc
EOF
cat > "$tmp/t/tools/run.sh" <<EOF
# $n [Beta]: defined a second time.
EOF
cat > "$tmp/t/tools/tool.py" <<EOF
"""A tool.

$n [Epsilon]: defined in a docstring.
"""
# Good: $n [Epsilon] (tools/tool.py). Bad: $n [Beta] (core/alpha.h).
EOF
cat > "$tmp/t/docs/guide.md" <<EOF
Good (\`$n [Alpha title]\` in \`core/alpha.h\`), good: ($n [Epsilon] in
\`tools/tool.py\`). Bad: ($n [Alpha title] in
\`core/kernel.cu\`), and $n [Zeta
eta] is defined nowhere.
EOF
{
  for i in $(seq 1 20); do echo "// line $i"; done
} > "$tmp/long"
{ echo "// $n [Long]: twenty lines."; sed -n 2,20p "$tmp/long"; } > "$tmp/t/tests/long_test.cc"
python3 "$check" "$tmp/t" > "$tmp/out" 2>&1 && { cat "$tmp/out"; fail "the checker passed a tree with mistakes"; }
cat > "$tmp/want" <<EOF
CMakeLists.txt:1: $n [Alpha title] points at core/beta.cc, but it is defined in core/alpha.h:2; fix: write core/alpha.h
core/beta.cc:6: $n [Gamma delta] is defined nowhere; fix: define it (a comment starting with the marker, the title and a colon) or drop it
core/kernel.cu:1: $n [Beta] points at alpha.h, but it is defined in core/beta.cc:4; fix: write core/beta.cc
docs/guide.md:2: $n [Alpha title] points at core/kernel.cu, but it is defined in core/alpha.h:2; fix: write core/alpha.h
docs/guide.md:3: $n [Zeta eta] is defined nowhere; fix: define it (a comment starting with the marker, the title and a colon) or drop it
tools/run.sh:1: $n [Beta] is defined again (also at core/beta.cc:4); fix: refer to it, $n [Beta] (core/beta.cc), or retitle one
tools/tool.py:5: $n [Beta] points at core/alpha.h, but it is defined in core/beta.cc:4; fix: write core/beta.cc
4 $n titles defined, 12 references, 7 problems; 1 $n blocks over 16 lines (warning only)
EOF
diff "$tmp/want" "$tmp/out" || fail "the checker's report on the test tree differs (- wanted, + got)"

python3 "$check" "$src" || fail "NOTE problems in the source tree (one per line above)"
