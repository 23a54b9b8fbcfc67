#!/usr/bin/env bash
# NOTE [Layers]: the dependency direction is tools -> runner -> backends | simulator -> core,
# checked on every #include "..." of the tree: core includes only core; simulator only core and
# itself; backends only core and themselves; runner neither tools nor tests. Each violation is
# printed as FILE:LINE: include. For core/ it is also a build fact (NOTE [Core include root] in
# CMakeLists.txt): with a core module's own compile command, a file that includes a simulator
# header does not compile, while one that includes a core header does.
set -eu
bin="$1"; src="$2"
build="$(cd "$(dirname "$bin")/.." && pwd)"
if [ -f "$build/compile_commands.json" ]; then
  python3 - "$build/compile_commands.json" <<'P'
import json, os, shlex, subprocess, sys, tempfile
cmds = json.load(open(sys.argv[1]))
entry = next(c for c in cmds if c["file"].endswith("core/fsdp/fully_shard.cc"))
args = shlex.split(entry["command"])
keep, skip = [], False
for a in args:  # the compiler and its flags, without -o OUT / -c SRC / dependency files
    if skip:
        skip = False
        continue
    if a in ("-o", "-c", "-MF", "-MT", "-MQ"):
        skip = True
        continue
    if a == "-MD" or a == "-MMD" or a.endswith("fully_shard.cc"):
        continue
    keep.append(a)
def compiles(include):
    with tempfile.NamedTemporaryFile("w", suffix=".cc", delete=False) as f:
        f.write(f'#include "{include}"\n')
    try:
        r = subprocess.run(keep + ["-fsyntax-only", f.name], cwd=entry["directory"],
                           capture_output=True, text=True)
        return r.returncode == 0, r.stderr
    finally:
        os.unlink(f.name)
ok, err = compiles("core/fsdp/fully_shard.h")
if not ok:
    print("a core module cannot compile a core include:\n" + err)
    sys.exit(1)
ok, _ = compiles("simulator/simulate.h")
if ok:
    print("a core module compiled #include \"simulator/simulate.h\": the core include root leaks")
    sys.exit(1)
print("core include root ok: core modules see only core/")
P
fi
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
