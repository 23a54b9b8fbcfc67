#!/usr/bin/env python3
"""The cuBLAS workspaces PyTorch takes from its caching allocator: the profile figure
blas_workspace_bytes and how many a training step holds (NOTE [cuBLAS workspaces] in
core/runtime/backend.cc).

On a fresh process and one GPU: a bf16 Linear's forward on the Python thread, then its
backward (autograd's device thread). torch.cuda.memory_allocated() after each, less the tensors
the step itself keeps, is what cuBLAS's workspaces hold. fullshard's model: one workspace of
getChosenWorkspaceSize() per (cuBLAS handle, stream) pair, so the forward adds one, the backward
another, and later steps none.

    python3 tools/measure/blas_workspace.py            # a Python with torch and a GPU
    python3 tools/measure/blas_workspace.py --json ws.json
"""
import argparse
import json
import sys

import torch

M, K, N = 256, 512, 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="also write the figures to this file")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("blas_workspace: no GPU visible to torch", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    torch.cuda.init()
    lin = torch.nn.Linear(K, N, bias=False, device=dev, dtype=torch.bfloat16)
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16, requires_grad=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    y = lin(x)
    torch.cuda.synchronize()
    after_forward = torch.cuda.memory_allocated() - base - y.untyped_storage().nbytes()
    y.sum().backward()
    torch.cuda.synchronize()
    kept = x.grad.untyped_storage().nbytes() + lin.weight.grad.untyped_storage().nbytes()
    del y
    after_backward = torch.cuda.memory_allocated() - base - kept
    for _ in range(3):  # later steps take no more
        x.grad = None
        lin.weight.grad = None
        lin(x).sum().backward()
    torch.cuda.synchronize()
    later = torch.cuda.memory_allocated() - base - kept
    # A block of the caching allocator is rounded to 512 B, and the sum's scalar output (512 B)
    # and its gradient can still be cached but not allocated; what is left is the workspaces.
    forward_ws = after_forward
    backward_ws = after_backward - after_forward
    result = {
        "torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(dev),
        "capability": list(torch.cuda.get_device_capability(dev)),
        "forward_workspace_bytes": forward_ws, "backward_workspace_bytes": backward_ws,
        "after_more_steps_bytes": later,
    }
    print(f"blas_workspace: torch {result['torch']} on {result['device']}: forward (Python thread) holds"
          f" {forward_ws} B, backward (autograd thread) {backward_ws} B more, {later} B after 3 more steps")
    same = forward_ws == backward_ws and later == forward_ws + backward_ws
    print(f"blas_workspace_bytes {forward_ws} ({'two per step, as fullshard models' if same else 'NOT as fullshard models: see NOTE [cuBLAS workspaces]'})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
