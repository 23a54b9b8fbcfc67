#!/usr/bin/env python3
"""PyTorch's pipeline schedules as the reference for fullshard's (issue 31, item 1).

Writes tests/data/oracle/pipeline_schedules.json: for each schedule class of
torch.distributed.pipelining.schedules and a grid of (pp ranks, stages per rank, microbatches),
the compute actions each rank runs, in order, as PyTorch prints them ("2F0", "1I3", "0W1",
"(0F3;3B1)OVERLAP_F_B"), or the error PyTorch raises for that shape.

  Multi-stage schedules (Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble,
  DualPipeV): `pipeline_order` with its idle slots (None) dropped; the runtime lowers exactly
  that order (adding only communication, unshard/reshard and reduce-grad actions).
  Single-stage schedules (GPipe, 1F1B): the runtime's own `_step_microbatches`, run on a stage
  stand-in that records forward_one_chunk / backward_one_chunk. Their `_get_pipeline_order` is
  only a visualisation, and 1F1B's gives the last rank F1..Fm where the runtime runs F0..Fm-1.

No process group is created: the stages are stand-ins with the attributes the constructors read.
CI has no torch; tests/unit/pipeline_schedule_test.cc needs only the JSON. Run by hand:
  python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch==2.11.0
  /tmp/venv/bin/python tools/oracle/pipeline_schedules.py tests/data/oracle/pipeline_schedules.json
"""
import json
import sys

import torch
import torch.distributed.pipelining.schedules as S

PP = [1, 2, 3, 4, 8]
MICROBATCHES = [1, 2, 3, 4, 5, 6, 8, 9, 12, 16]
MULTI = {  # class -> (stages per rank to try, stage placement)
    "Interleaved1F1B": ([1, 2, 3, 4], "loop"),
    "LoopedBFS": ([1, 2, 3], "loop"),
    "InterleavedZeroBubble": ([1, 2, 3, 4], "loop"),
    "ZBVZeroBubble": ([2], "v"),
    "DualPipeV": ([2], "v"),
}
SINGLE = ["GPipe", "1F1B"]


class Stage:
    """What the multi-stage constructors read from a PipelineStage."""

    def __init__(self, index, num_stages, group_size):
        self.stage_index, self.num_stages, self.group_size = index, num_stages, group_size
        self.group_rank = 0
        self.is_first, self.is_last = index == 0, index == num_stages - 1
        self.submod = torch.nn.Linear(1, 1)
        self.stage_index_to_group_rank = {}


class Recorder:
    """A single stage that records what the runtime computes."""

    def __init__(self, index, num_stages, log):
        self.stage_index, self.num_stages, self.log = index, num_stages, log
        self.is_first, self.is_last = index == 0, index == num_stages - 1

    def __getattr__(self, name):
        if name.startswith("get_") and name.endswith("_ops"):
            return lambda *args, **kwargs: []  # no P2P: nothing to send or receive
        raise AttributeError(name)

    def forward_one_chunk(self, i, *args, **kwargs):
        self.log.append(f"{self.stage_index}F{i}")

    def backward_one_chunk(self, i, **kwargs):
        self.log.append(f"{self.stage_index}B{i}")

    def perform_reduce_grad(self, *args):
        pass


def multi(name, pp, per_rank, m, placement):
    n = pp * per_rank
    stages_of_rank0 = [0, n - 1] if placement == "v" else list(range(0, n, pp))
    sched = S.get_schedule_class(name)([Stage(i, n, pp) for i in stages_of_rank0], m)
    return [" ".join(str(a) for a in sched.pipeline_order[r] if a is not None) for r in range(pp)]


def single(name, pp, m):
    cls = S.get_schedule_class(name)
    if name == "1F1B" and m < pp:  # the constructor's own check (it needs a real stage)
        raise ValueError(f"Number of microbatches ({m}) must be greater than or equal to the "
                         f"number of stages ({pp}).")
    ranks = []
    for r in range(pp):
        log = []
        s = cls.__new__(cls)
        s._stage, s._n_microbatches, s._num_stages, s.scale_grads = Recorder(r, pp, log), m, pp, True
        s._check_inputs = lambda *args: ([()] * m, [{}] * m)
        s._initialize_stage = s._maybe_compute_loss = s._maybe_get_loss = lambda *a: None
        s._update_losses = lambda *a: None
        cls._step_microbatches(s)
        ranks.append(" ".join(log))
    return ranks


def main(out):
    cases = []
    for name in SINGLE + list(MULTI):
        for pp in PP:
            for per_rank in MULTI[name][0] if name in MULTI else [1]:
                for m in MICROBATCHES:
                    case = {"schedule": name, "pp": pp, "stages_per_rank": per_rank,
                            "microbatches": m}
                    try:
                        case["ranks"] = (multi(name, pp, per_rank, m, MULTI[name][1])
                                         if name in MULTI else single(name, pp, m))
                    except Exception as e:  # PyTorch refuses the shape: so must fullshard
                        case["error"] = str(e).splitlines()[0]
                    cases.append(case)
    doc = {"torch": torch.__version__, "source": "torch/distributed/pipelining/schedules.py",
           "cases": cases}
    with open(out, "w") as f:
        json.dump(doc, f, indent=0, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
