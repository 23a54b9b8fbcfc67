#!/usr/bin/env python3
"""Writes the DCP checkpoints tests/unit/checkpoint_dcp_test.cc reads (docs/checkpoints.md,
"DCP's own format"): what torch.distributed.checkpoint's FileSystemWriter writes, so that
fullshard's reader is checked against PyTorch's bytes without torch at test time.

  OUT/fsdp2/   nn.Sequential(Linear(4, 5), Linear(5, 3, bias=False)) fully_shard-ed over 2 Gloo
               ranks on the CPU, saved with dcp.save(get_model_state_dict(model)): every tensor
               in 2 chunks (rows 3 + 2, 3 + 2 and 2 + 1), one __<rank>_0.distcp per rank.
               Element k of the i-th parameter (named_parameters order) is 1000 i + k.
  OUT/plain/   dcp.save without a process group of {"w": bf16 [2, 3] = k + 0.5,
               "h": f16 [4] = k / 4, "step": 7}: one chunk each; "step" is not a tensor
               (BytesStorageMetadata, a torch.save of the int).

Usage: python tools/oracle/dcp_checkpoints.py tests/data/oracle/dcp
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def worker(rank, world, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29631")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = nn.Sequential(nn.Linear(4, 5), nn.Linear(5, 3, bias=False))
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_((1000 * i + torch.arange(p.numel(), dtype=torch.float32)).reshape(p.shape))
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    os.chdir(out)  # relative checkpoint_id: no absolute path in .metadata's storage_meta
    dcp.save(get_model_state_dict(model), checkpoint_id="fsdp2")
    dist.destroy_process_group()


def main():
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    mp.spawn(worker, args=(2, out), nprocs=2, join=True)
    os.chdir(out)
    sd = {"w": (torch.arange(6, dtype=torch.float32) + 0.5).reshape(2, 3).to(torch.bfloat16),
          "h": (torch.arange(4, dtype=torch.float32) / 4).to(torch.float16), "step": 7}
    dcp.save(sd, checkpoint_id="plain", no_dist=True)
    print(f"wrote {out}/fsdp2 and {out}/plain with torch {torch.__version__}")


if __name__ == "__main__":
    main()
