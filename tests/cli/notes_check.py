#!/usr/bin/env python3
"""Checks the NOTE blocks of a source tree (issue 29 item 6); tests/cli/notes.sh runs it.

A definition is a comment line (C++/CUDA `//`, CMake/shell/Python `#`, a Python docstring line)
that starts with the marker, a title in brackets, then a colon or nothing. Any other mention of
the marker and a bracketed title is a reference: it must name a defined title, and a pointer
right after it (` in path/file.h` or ` (file.h)`) must name the file holding the definition,
by its path from the repository root or by its base name. docs/*.md, README.md and JSON
descriptions only refer. A mention may wrap over two lines (the title, or the pointer, on the
next comment line). A title defined twice is an error: the second mention becomes a reference
with a pointer. Every problem is one line, FILE:LINE: what is wrong; the fix.

Exit 1 on a problem. NOTE blocks longer than LONG lines are warned about (not an error), with a
count: a NOTE says what holds and why in about a dozen lines; history goes to docs/.

Usage: notes_check.py ROOT [--list-long]
"""
import difflib
import os
import re
import sys

LONG = 16
C_LIKE = (".h", ".hpp", ".cc", ".cpp", ".c", ".cu", ".cuh")
HASH = (".sh", ".py", ".cmake", ".supp", ".txt", ".yml", ".yaml", ".toml")
TEXT = (".md", ".json")
FILE_EXT = r"(?:h|hpp|cc|cpp|c|cu|cuh|md|py|sh|cmake|txt|json|supp)"
MARK = "NOTE"  # spelled once so that this file names no title itself
MENTION = re.compile(MARK + r"\s+\[([^\]\n]*)\]")
POINTER_IN = re.compile(r"\s+in\s+`?([\w./+-]+\." + FILE_EXT + r")\b`?")
POINTER_PAREN = re.compile(r"\s*\(`?([\w./+-]+\." + FILE_EXT + r")\b`?")
LEADER = re.compile(r"^\s*(?://+|#+|/\*+|\*+|\"\"\"|''')?\s*")
SKIP_DIRS = {"__pycache__", "node_modules"}
SELF = os.path.join("tests", "cli", "notes_check.py")


def source_files(root):
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if not d.startswith((".", "build")) and d not in SKIP_DIRS
                             and not os.path.exists(os.path.join(dirpath, d, "CMakeCache.txt")))
        for f in sorted(files):
            path = os.path.relpath(os.path.join(dirpath, f), root)
            if path == SELF:
                continue
            if f.endswith(C_LIKE + HASH + TEXT) or f == "CMakeLists.txt":
                yield path


def kind_of(path):
    if path.endswith(C_LIKE):
        return "c"
    if path.endswith(TEXT):
        return "text"
    return "hash"


def body(line):
    """The line without its comment leader (`//`, `#`, `*`, a docstring's quotes)."""
    return LEADER.sub("", line, count=1)


def is_comment(kind, line):
    s = line.lstrip()
    if kind == "c":
        return s.startswith(("//", "/*", "*"))
    return s.startswith("#")


def scan(root):
    """Returns (definitions, references, blocks): {title: [(path, line)]}, [(path, line, title,
    pointer)], [(path, line, title, length)]."""
    defs, refs, blocks = {}, [], []
    for path in source_files(root):
        try:
            lines = open(os.path.join(root, path), encoding="utf-8").read().split("\n")
        except (UnicodeDecodeError, OSError):
            continue
        kind = kind_of(path)
        in_docs = kind == "text"
        for i, cur in enumerate(lines):
            nxt = body(lines[i + 1]) if i + 1 < len(lines) else ""
            joined = cur + " " + nxt
            for m in MENTION.finditer(joined):
                if m.start() >= len(cur):
                    break
                title = " ".join(m.group(1).split())
                if re.fullmatch(r"[.…]*", title):
                    continue  # a placeholder, as in "NOTE [..] blocks"
                rest_line = cur[m.end():] if m.end() <= len(cur) else ""
                at_start = len(body(cur[:m.start()] + "x")) == 1  # nothing but the leader before
                if (not in_docs and at_start and m.end() <= len(cur)
                        and re.match(r"\s*(:|$)", rest_line)):
                    defs.setdefault(title, []).append((path, i + 1))
                    blocks.append((path, i + 1, title, block_length(kind, lines, i)))
                    continue
                rest = joined[m.end():]
                p = POINTER_IN.match(rest) or POINTER_PAREN.match(rest)
                refs.append((path, i + 1, title, p.group(1) if p else None))
    return defs, refs, blocks


def block_length(kind, lines, i):
    """Lines from the definition to the end of its comment (a docstring's paragraph), stopping
    before the next definition; trailing empty comment lines do not count."""
    commented = is_comment(kind, lines[i])
    n = 1
    for line in lines[i + 1:]:
        if commented and not is_comment(kind, line):
            break
        if not commented and (not line.strip() or '"""' in line or "'''" in line):
            break
        b = body(line)
        d = MENTION.match(b)
        if d and re.match(r"\s*(:|$)", b[d.end():]):
            break
        n += 1
    while n > 1 and body(lines[i + n - 1]).strip() == "":
        n -= 1
    return n


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = args[0] if args else "."
    defs, refs, blocks = scan(root)
    # Of a title defined twice, the home is the longer block outside tests/.
    length = {(b[0], b[1]): b[3] for b in blocks}
    for where in defs.values():
        where.sort(key=lambda w: (w[0].startswith("tests/"), -length[w], w))
    problems = []
    for title, where in sorted(defs.items()):
        for path, line in where[1:]:
            problems.append(
                f"{path}:{line}: NOTE [{title}] is defined again (also at {where[0][0]}:"
                f"{where[0][1]}); fix: refer to it, NOTE [{title}] ({where[0][0]}), or retitle one")
    for path, line, title, pointer in refs:
        if title not in defs:
            close = difflib.get_close_matches(title, list(defs), n=1, cutoff=0.6)
            hint = f"did you mean NOTE [{close[0]}] ({defs[close[0]][0][0]})?" if close else \
                "define it (a comment starting with the marker, the title and a colon) or drop it"
            problems.append(f"{path}:{line}: NOTE [{title}] is defined nowhere; fix: {hint}")
            continue
        if pointer is None:
            continue
        home = defs[title][0][0]
        p = pointer.strip("`")
        ok = home == p or home.endswith("/" + p)
        if not ok:
            problems.append(f"{path}:{line}: NOTE [{title}] points at {p}, but it is defined in "
                            f"{home}:{defs[title][0][1]}; fix: write {home}")
    problems.sort(key=lambda p: (p.split(":")[0], int(p.split(":")[1])))
    for p in problems:
        print(p)
    long_blocks = [b for b in blocks if b[3] > LONG]
    for path, line, title, n in sorted(long_blocks, key=lambda b: -b[3]):
        if "--list-long" in sys.argv:
            print(f"warning: {path}:{line}: NOTE [{title}] is {n} lines (over {LONG}); keep what "
                  f"holds and why, move history to docs/")
    print(f"{len(defs)} NOTE titles defined, {len(refs)} references, {len(problems)} problems; "
          f"{len(long_blocks)} NOTE blocks over {LONG} lines (warning only)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
