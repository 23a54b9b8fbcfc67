#!/usr/bin/env python3
"""PyTorch's lowered pipeline schedules as the reference for fullshard's (issue 31).

Writes tests/data/oracle/pipeline_lowered.json: for each multi-stage schedule class of
torch.distributed.pipelining.schedules (the ones `_PipelineScheduleRuntime` runs) over the grid
of tools/oracle/pipeline_schedules.py, every rank's `pipeline_order_with_comms` as PyTorch prints
it: the compute actions with the UNSHARD / RESHARD (`_add_unshard_reshard`), REDUCE_GRAD
(`_add_reduce_grad`) and SEND_F / RECV_F / SEND_B / RECV_B (`_add_send_recv`) actions the
constructor's `_prepare_schedule_with_comms` adds, e.g. "1RECV_F0 1F0 1SEND_F0". Shapes PyTorch
refuses are left out (pipeline_schedules.json holds their errors).

CI has no torch; tests/unit/pipeline_lowering_test.cc needs only the JSON. Run by hand:
  python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch==2.11.0
  /tmp/venv/bin/python tools/oracle/pipeline_lowered.py tests/data/oracle/pipeline_lowered.json
"""
import json
import os
import sys

import torch
import torch.distributed.pipelining.schedules as S

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline_schedules import MICROBATCHES, MULTI, PP, Stage  # noqa: E402


def lowered(name, pp, per_rank, m, placement):
    n = pp * per_rank
    stages_of_rank0 = [0, n - 1] if placement == "v" else list(range(0, n, pp))
    sched = S.get_schedule_class(name)([Stage(i, n, pp) for i in stages_of_rank0], m)
    return [" ".join(str(a) for a in sched.pipeline_order_with_comms[r]) for r in range(pp)]


def main(out):
    cases = []
    for name in MULTI:
        for pp in PP:
            for per_rank in MULTI[name][0]:
                for m in MICROBATCHES:
                    try:
                        ranks = lowered(name, pp, per_rank, m, MULTI[name][1])
                    except Exception:  # refused: see pipeline_schedules.json
                        continue
                    cases.append({"schedule": name, "pp": pp, "stages_per_rank": per_rank,
                                  "microbatches": m, "ranks": ranks})
    doc = {"torch": torch.__version__, "source": "torch/distributed/pipelining/schedules.py",
           "cases": cases}
    with open(out, "w") as f:
        json.dump(doc, f, indent=0, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
