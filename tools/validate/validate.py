#!/usr/bin/env python3
"""Predicted vs published: simulates every row of tools/validate/published.json with the fullshard
binary and prints tokens/s per GPU, MFU and out-of-memory beside the published figures, with the
bars of issue 10 (tokens/s within 10% on every row and 5% on average; the OOM rows predicted OOM;
MFU never above the GEMM efficiency of the profile).

    tools/validate/validate.py [--fullshard build/bin/fullshard] [--json OUT.json]

Exit code: 0 when every bar holds, 1 otherwise (the table says which), 2 on bad input.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def simulate(fullshard: str, scenario: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        p = subprocess.run([fullshard, "simulate", scenario, "--json", out, "--no-checks"],
                           capture_output=True, text=True)
        if p.returncode not in (0, 1, 3) or not os.path.exists(out):
            sys.exit(f"validate: fullshard simulate {scenario} failed (exit {p.returncode}): {p.stderr.strip()}")
        with open(out) as f:
            return json.load(f)


def rep_scenario(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def rep_profile(scenario: dict) -> dict:
    with open(os.path.join(ROOT, "scenarios", "hardware", scenario["hardware"]["profile"] + ".json")) as f:
        return json.load(f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fullshard", default=os.path.join(ROOT, "build", "bin", "fullshard"))
    ap.add_argument("--rows", default=os.path.join(HERE, "published.json"))
    ap.add_argument("--json", help="write the table as JSON here")
    a = ap.parse_args()
    if not os.access(a.fullshard, os.X_OK):
        print(f"validate: --fullshard: '{a.fullshard}' is not an executable; build fullshard first", file=sys.stderr)
        return 2
    rows = json.load(open(a.rows))["rows"]
    table, errors, ok = [], [], True
    print(f"{'scenario':24} {'published':>10} {'predicted':>10} {'error':>8} {'pub MFU':>8} {'pred MFU':>8}  OOM pub/pred")
    for r in rows:
        rep = simulate(a.fullshard, os.path.join(HERE, r["scenario"]))
        oom = bool(rep["out_of_memory"])
        pred = rep["tokens_per_s_per_gpu"] if not oom else None
        pub = r["published_tokens_per_s_per_gpu"]
        row = {"scenario": r["scenario"], "published_tokens_per_s_per_gpu": pub, "predicted_tokens_per_s_per_gpu": pred,
               "published_mfu": r["published_mfu"], "predicted_mfu": None if oom else rep["mfu"],
               "published_oom": r["published_oom"], "predicted_oom": oom}
        verdict = ""
        # MFU can never exceed what the profile's best GEMM reaches alone (at sustained clocks).
        prof = rep_profile(rep_scenario(os.path.join(HERE, r["scenario"])))
        gemm_ceiling = max(e for _, e in prof["matmul_efficiency"]) * prof.get("sustained_clock_ratio", 1.0)
        row["gemm_ceiling"] = gemm_ceiling
        if not oom and rep["mfu"] > gemm_ceiling:
            ok, verdict = False, "  MFU above the GEMM ceiling"
        if r["published_oom"] != oom:
            ok, verdict = False, "  OOM DIFFERS"
        elif pub is not None and pred is not None:
            err = pred / pub - 1
            row["error"] = err
            errors.append(abs(err))
            if abs(err) > 0.10:
                ok, verdict = False, "  outside the 10% bar"
        table.append(row)
        fmt = lambda v, spec: format(v, spec) if v is not None else format("-", ">" + spec.lstrip("+").split(".")[0])
        print(f"{r['scenario']:24} {fmt(pub, '10.0f')} {fmt(pred, '10.0f')} {fmt(row.get('error'), '+8.1%')} "
              f"{fmt(r['published_mfu'], '8.1%')} {fmt(row['predicted_mfu'], '8.1%')}  "
              f"{'yes' if r['published_oom'] else 'no'}/{'yes' if oom else 'no'}{verdict}")
    mean = sum(errors) / len(errors) if errors else 0.0
    if mean > 0.05:
        ok = False
    print(f"mean absolute tokens/s error {mean:.1%} over {len(errors)} rows (bar: 5%); "
          f"{'all bars hold' if ok else 'NOT all bars hold'}")
    if a.json:
        json.dump({"rows": table, "mean_abs_error": mean, "bars_hold": ok}, open(a.json, "w"), indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
