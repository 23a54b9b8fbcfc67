#!/usr/bin/env python3
"""Checks that README.md and docs/*.md name only repository paths that exist; tests/cli/doc_paths.sh
runs it.

What counts as a path:
- a word that starts with a top-level folder of the repository (TOPS below) and a slash, such as
  core/fsdp/fsdp_param.h, `tools/gpu-check.sh` or the folder simulator/cost/. It must not follow a
  letter, digit, '/', '.' or '-': another repository's file is written with that repository in
  front (torchtitan/docs/performance.md, pytorch/tools/autograd/derivatives.yaml) and is not
  checked. Trailing punctuation, a ":LINE" suffix and a "#anchor" are not part of it;
  `a.{h,cc}` stands for a.h and a.cc.
- the target of a Markdown link, [text](target), relative to the document's folder (web
  addresses and #anchors alone are skipped; an anchor after a file is not checked).
Not checked: globs (*), placeholders (<name>, $VAR, a component that is a single capital letter
such as X or N, "..."), and a path a command writes (right after -o, --output, --out, > or >>).

Every problem is one line, FILE:LINE: path does not exist; the fix (the one file of that name
elsewhere in the tree when there is one). Exit 1 on a problem.

Usage: doc_paths_check.py ROOT
"""
import os
import re
import sys

TOPS = ("core", "simulator", "backends", "runner", "tools", "tests", "scenarios", "docs", "cmake",
        ".ci")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(t) for t in TOPS) +
                  r")/[\w./+{},*<>$-]*)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
WRITES = re.compile(r"(?:(?:^|\s)(?:-o|--output|--out)(?:\s+|=)|>>?\s*)`?$")
SKIP_DIRS = {"__pycache__", "node_modules"}


def documents(root):
    docs = os.path.join(root, "docs")
    names = sorted(f for f in os.listdir(docs) if f.endswith(".md")) if os.path.isdir(docs) else []
    return (["README.md"] if os.path.exists(os.path.join(root, "README.md")) else []) + \
        [os.path.join("docs", f) for f in names]


def tree_files(root):
    """Base name -> paths of every file and folder under the root (the same skips as
    notes_check.py: hidden folders but .ci, build folders)."""
    by_name = {}
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if (d == ".ci" or not d.startswith((".", "build")))
                             and d not in SKIP_DIRS
                             and not os.path.exists(os.path.join(dirpath, d, "CMakeCache.txt")))
        for f in files + dirnames:
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            by_name.setdefault(f, []).append(rel)
    return by_name


def expand(path):
    """a/b.{h,cc} -> [a/b.h, a/b.cc] (one brace group at a time)."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    out = []
    for alt in m.group(1).split(","):
        out += expand(path[:m.start()] + alt + path[m.end():])
    return out


def placeholder(path):
    if any(c in path for c in "*<>$") or "..." in path:
        return True
    for part in path.split("/"):
        stem = part.split(".")[0]
        if len(stem) == 1 and stem.isupper():
            return True
    return False


def clean(path):
    path = re.sub(r":\d+(?:-\d+)?$", "", path)
    while path and path[-1] in ".,:;'\"`":
        path = path[:-1]
    return path


def mentions(line):
    """(path, relative-to-document) for each path and link target on the line."""
    for m in PATH.finditer(line):
        if WRITES.search(line[:m.start()]):
            continue
        raw = m.group(1)
        if "{" in raw and "}" not in raw:
            continue  # a brace group cut by the pattern: cannot be read
        if "{" not in raw:
            raw = raw.split(",")[0]  # "core/a.h,b" lists a path, then a word
        for p in expand(clean(raw)):
            yield clean(p), False
    for m in LINK.finditer(line):
        target = m.group(1).split("#")[0]
        if not target or re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # an anchor alone, or a web address
        yield target, True


def check(root):
    problems = []
    by_name = None
    for doc in documents(root):
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            lines = f.read().split("\n")
        for i, line in enumerate(lines, 1):
            seen = set()  # a link target that is also a path from the root is one mention
            for path, relative in mentions(line):
                if placeholder(path):
                    continue
                full = os.path.normpath(os.path.join(root, os.path.dirname(doc) if relative else "",
                                                     path))
                if full in seen or os.path.exists(full):
                    continue
                seen.add(full)
                if by_name is None:
                    by_name = tree_files(root)
                name = os.path.basename(path.rstrip("/"))
                found = by_name.get(name, [])
                if len(found) == 1:
                    new = os.path.relpath(os.path.join(root, found[0]),
                                          os.path.join(root, os.path.dirname(doc))) \
                        if relative else found[0]
                    fix = f"write {new}"
                elif found:
                    fix = f"one of {', '.join(sorted(found))}"
                else:
                    fix = ("name a path that exists, drop it, or write another repository's "
                           "file with that repository in front (torchtitan/docs/...)")
                problems.append(f"{doc}:{i}: {path} does not exist; fix: {fix}")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems = check(root)
    for p in problems:
        print(p)
    print(f"{len(documents(root))} documents, {len(problems)} paths that do not exist")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
