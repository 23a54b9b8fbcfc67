#!/usr/bin/env python3
"""torchtitan's default split of a decoder into pipeline stages as the reference for fullshard's
(issue 31, item 1).

Runs `_generate_llm_fqn_per_model_part` from a torchtitan checkout's
torchtitan/distributed/pipeline_parallel.py (the function alone, taken out of the file with `ast`
and run as it is there: it is plain Python) over a grid of (stages, layers, input weight, output
weight) and writes tests/data/oracle/pipeline_stage_split.json: each case is
[stages, layers, input_weight, output_weight, result], the result being every stage's modules
written compactly ("e" tok_embeddings, "A-B" layers A..B-1 or "0-0" for none, "o" norm + lm_head;
stages separated by spaces) or "!" and torchtitan's error.

  python3 tools/oracle/pipeline_stage_split.py TORCHTITAN_CHECKOUT tests/data/oracle/pipeline_stage_split.json
"""
import ast
import json
import pathlib
import subprocess
import sys

LAYERS = [1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 40, 61, 80, 126]


def load(checkout):
    path = pathlib.Path(checkout) / "torchtitan/distributed/pipeline_parallel.py"
    tree = ast.parse(path.read_text())
    fn = next(n for n in tree.body
              if isinstance(n, ast.FunctionDef) and n.name == "_generate_llm_fqn_per_model_part")
    scope = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), scope)
    commit = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return scope["_generate_llm_fqn_per_model_part"], commit


def compact(stage):
    layers = [int(m.split(".")[1]) for m in stage if m.startswith("layers.")]
    first = layers[0] if layers else None
    assert layers == list(range(first, first + len(layers))) if layers else True
    out = "e" if "tok_embeddings" in stage else ""
    out += f"{first}-{first + len(layers)}" if layers else "0-0"
    return out + ("o" if "lm_head" in stage else "")


def main(checkout, out):
    split, commit = load(checkout)
    cases = []
    for stages in range(1, 17):
        for layers in LAYERS:
            for iw in range(3):
                for ow in range(3):
                    try:
                        result = " ".join(compact(s) for s in split(stages, layers, iw, ow))
                    except ValueError as e:
                        result = "!" + str(e).splitlines()[0]
                    cases.append([stages, layers, iw, ow, result])
    doc = {"torchtitan": commit, "source": "torchtitan/distributed/pipeline_parallel.py",
           "cases": cases}
    with open(out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
