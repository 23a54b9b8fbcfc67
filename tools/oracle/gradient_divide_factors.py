#!/usr/bin/env python3
"""FSDP2's gradient divide factors as the reference for fullshard's (issue 33, item 2).

Runs torch.distributed.fsdp._fully_shard._fsdp_collectives._get_gradient_divide_factors (the
installed torch, 2.11 when the file was written) over a grid of (shard size, replicate size or 0
for none, reduce dtype, set_gradient_divide_factor's factor or null, set_force_sum_reduction_for_
comms) with stand-in groups that only answer size(), and writes tests/data/oracle/
gradient_divide_factors.json: each case is [shard, replicate, dtype, factor, force_sum, result],
the result being [pre, post, reduce_scatter_op, all_reduce_op] with pre / post null for none and
an op written "sum", "avg" or "premul_sum:<factor>".

  python3 tools/oracle/gradient_divide_factors.py tests/data/oracle/gradient_divide_factors.json
"""
import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard import _fsdp_collectives as fc

SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 1024]
REPLICAS = [0, 1, 2, 3, 4, 8]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
FACTORS = [None, 1.0, 2.0, 3.0, 8.0, 0.5, 12.0, 64.0]


class Group:
    def __init__(self, n):
        self.n = n

    def size(self):
        return self.n


def op_name(op, factors_seen):
    if op == dist.ReduceOp.SUM:
        return "sum"
    if op == dist.ReduceOp.AVG:
        return "avg"
    return None  # a premul sum: named by the caller, which knows its factor


def main(out):
    cases = []
    for shard in SIZES:
        for rep in REPLICAS:
            for dname, dt in DTYPES.items():
                for factor in FACTORS:
                    for force in (False, True):
                        pre, post, rs, ar = fc._get_gradient_divide_factors(
                            Group(shard), Group(rep) if rep else None, dt, "cuda", factor, force)
                        rs_name = op_name(rs, None) or f"premul_sum:{1.0 / factor!r}"
                        ar_name = op_name(ar, None)
                        assert ar_name is not None
                        cases.append([shard, rep, dname, factor, force,
                                      [pre, post, rs_name, ar_name]])
    doc = {"torch": torch.__version__,
           "function": "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py "
                       "_get_gradient_divide_factors",
           "cases": cases}
    with open(out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} cases -> {out}")


if __name__ == "__main__":
    main(sys.argv[1])
