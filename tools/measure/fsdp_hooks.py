#!/usr/bin/env python3
"""Host seconds of FSDP2's hooks beyond the ops they launch: the profile figures fsdp_hook_s and
fsdp_hook_param_s (NOTE [FSDP hook host cost] in simulator/cost/hardware_cost_model.cc).

Times, on the CPU with one gloo rank (what it measures is Python and dispatch work, the same on
a GPU host up to the core's speed): forward + backward of `units` modules of `p` parameters,
plain and under fully_shard (each unit, then the root), for several p. FSDP's extra time per
unit and step is its four hooks plus the aten ops it runs (counted with torch.profiler and
priced at the measured time of one tiny eager op); what remains, over 4 hook calls, is fitted
as a + b * p: a = fsdp_hook_s, b = fsdp_hook_param_s.

    python3 tools/measure/fsdp_hooks.py            # any Python with torch (CPU is enough)
    python3 tools/measure/fsdp_hooks.py -o hooks.csv
    fullshard calibrate measured.csv hooks.csv --hardware h100 -o h100-measured.json

With -o it also writes each parameter count's per-hook time as an `fsdp_hook` sample of the CSV
`fullshard calibrate` reads (NOTE [Direct samples] in simulator/cost/calibrate.h), which fits
the same line.
"""
import argparse
import os
import platform
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

D, UNITS, ITERS = 16, 16, 200


def model(linears: int) -> nn.Module:
    return nn.Sequential(*[nn.Sequential(*[nn.Linear(D, D) for _ in range(linears)]) for _ in range(UNITS)])


def step(m: nn.Module, x: torch.Tensor) -> None:
    m(x).sum().backward()


def seconds(fn, iters: int = ITERS) -> float:
    for _ in range(20):
        fn()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best


def aten_ops(fn) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    def top_level(e) -> bool:  # an aten op not called from inside another aten op
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        return parent is None
    return sum(1 for e in prof.events() if e.name.startswith("aten::") and top_level(e))


def write_csv(path: str, rows: list[tuple[int, float]], op_s: float) -> None:
    with open(path, "w") as out:
        out.write(f"# tools/measure/fsdp_hooks.py: torch {torch.__version__}, {platform.processor() or platform.machine()}, "
                  f"one gloo rank; one tiny eager op {op_s * 1e6:.2f} us\n")
        out.write("op,params,time_s\n")
        for params, hook_s in rows:
            if hook_s > 0:  # noise can leave nothing above the ops; calibrate takes positive times
                out.write(f"fsdp_hook,{params},{hook_s:.6g}\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", help="also write the samples as a calibration CSV")
    args = p.parse_args()
    if args.output:
        try:
            open(args.output, "a").close()
        except OSError as e:
            sys.exit(f"fsdp_hooks.py: --output: cannot write '{args.output}' ({e.strerror}); give a writable path")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.set_num_threads(1)
    tiny = torch.zeros(1)
    op_s = seconds(lambda: tiny.add_(1), 20000)
    print(f"# torch {torch.__version__}, one tiny eager op: {op_s * 1e6:.2f} us")
    rows = []
    for linears in (1, 2, 4, 9):
        x = torch.randn(4, D, requires_grad=True)
        plain = model(linears)
        sharded = model(linears)
        for u in sharded:
            fully_shard(u)
        fully_shard(sharded)
        t_plain, t_fsdp = seconds(lambda: step(plain, x)), seconds(lambda: step(sharded, x))
        extra_ops = (aten_ops(lambda: step(sharded, x)) - aten_ops(lambda: step(plain, x))) / UNITS
        per_unit = (t_fsdp - t_plain) / UNITS
        hooks = max(0.0, per_unit - extra_ops * op_s) / 4
        params = 2 * linears
        rows.append((params, hooks))
        print(f"{params:3d} params/unit: plain {t_plain * 1e6:8.1f} us, fully_shard {t_fsdp * 1e6:8.1f} us per step; "
              f"per unit {per_unit * 1e6:6.1f} us with {extra_ops:.1f} extra aten ops; per hook call {hooks * 1e6:6.1f} us")
    n = len(rows)
    mp, mh = sum(p for p, _ in rows) / n, sum(h for _, h in rows) / n
    b = sum((p - mp) * (h - mh) for p, h in rows) / sum((p - mp) ** 2 for p, _ in rows)
    a = mh - b * mp
    print(f"fsdp_hook_s {a:.3g}  fsdp_hook_param_s {b:.3g}")
    if args.output:
        write_csv(args.output, rows, op_s)
        print(f"fsdp_hooks.py: wrote {len(rows)} fsdp_hook samples to {args.output}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
