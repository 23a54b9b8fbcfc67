#!/usr/bin/env bash
# NOTE [Layers]: the dependency direction is tools -> runner -> backends | simulator -> core,
# checked on every #include "..." of the tree (a convention until every library stops putting
# the repository root on its public include path, issue 29): core includes only core;
# simulator only core and itself; backends only core and themselves; runner neither tools nor
# tests. Each violation is printed as FILE:LINE: include.
set -eu
src="$2"
cd "$src"
python3 - <<'P'
import os, re, sys
allowed = {
    "core": {"core"},
    "simulator": {"core", "simulator"},
    "backends": {"core", "backends"},
    "runner": {"core", "backends", "simulator", "runner"},
}
bad = []
for layer, ok in allowed.items():
    for dirpath, _, files in os.walk(layer):
        for f in files:
            if not f.endswith((".h", ".cc", ".cu", ".cuh")):
                continue
            path = os.path.join(dirpath, f)
            for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                m = re.match(r'\s*#\s*include\s+"([^"/]+)/', line)
                if m and m.group(1) not in ok:
                    bad.append(f"{path}:{n}: {line.strip()} ({layer}/ may include only {', '.join(sorted(ok))})")
if bad:
    print("layering violations:\n" + "\n".join(bad))
    sys.exit(1)
print("layers ok")
P
