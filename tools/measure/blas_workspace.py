#!/usr/bin/env python3
"""The cuBLAS workspaces PyTorch takes from its caching allocator: the profile figure
blas_workspace_bytes and how many a training step holds (NOTE [cuBLAS workspaces] in
core/runtime/backend.cc).

One GPU, one process. After torch._C._cuda_clearCublasWorkspaces(): a bf16 matmul's forward on
the Python thread, then its backward (autograd's device thread); torch.cuda.memory_allocated()
after each, less the tensors the step keeps, is what the workspaces hold. fullshard's model: one
workspace of getChosenWorkspaceSize() per (cuBLAS handle, stream) pair, so the forward adds one,
the backward another, and later steps none. Also reported, not modelled: the backward under
torch.autograd.set_multithreading_enabled(False) (the calling thread: no second workspace) and a
biased linear (cuBLASLt's own workspace in some releases).

    python3 tools/measure/blas_workspace.py            # a Python with torch and a GPU
    python3 tools/measure/blas_workspace.py --json ws.json
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

M, K, N = 256, 512, 1024


def step_deltas(bias: bool = False, multithreading: bool = True) -> tuple[int, int, int]:
    """Workspace bytes held after the forward, added by the backward, and after 3 more steps."""
    dev = torch.device("cuda", 0)
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.synchronize()
    w = torch.randn(N, K, device=dev, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(N, device=dev, dtype=torch.bfloat16, requires_grad=True) if bias else None
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16, requires_grad=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    y = F.linear(x, w, b)
    torch.cuda.synchronize()
    forward = torch.cuda.memory_allocated() - base - y.untyped_storage().nbytes()
    with torch.autograd.set_multithreading_enabled(multithreading):
        y.sum().backward()
        del y
        torch.cuda.synchronize()
        kept = sum(t.grad.untyped_storage().nbytes() for t in (x, w, b) if t is not None)
        backward = torch.cuda.memory_allocated() - base - kept - forward
        for _ in range(3):
            for t in (x, w, b):
                if t is not None:
                    t.grad = None
            F.linear(x, w, b).sum().backward()
        torch.cuda.synchronize()
    later = torch.cuda.memory_allocated() - base - kept
    return forward, backward, later


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="also write the figures to this file")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("blas_workspace: no GPU visible to torch", file=sys.stderr)
        return 2
    torch.cuda.init()
    fw, bw, later = step_deltas()
    st_fw, st_bw, _ = step_deltas(multithreading=False)
    b_fw, b_bw, _ = step_deltas(bias=True)
    dev = torch.device("cuda", 0)
    result = {
        "torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(dev),
        "capability": list(torch.cuda.get_device_capability(dev)),
        "forward_workspace_bytes": fw, "backward_workspace_bytes": bw, "after_more_steps_bytes": later,
        "single_thread_backward": [st_fw, st_bw], "biased_linear": [b_fw, b_bw],
    }
    print(f"blas_workspace: torch {result['torch']} on {result['device']}: forward (Python thread) holds {fw} B,"
          f" backward (autograd thread) {bw} B more, {later} B after 3 more steps; backward on the calling"
          f" thread: {st_fw} + {st_bw} B; biased linear: {b_fw} + {b_bw} B")
    same = fw == bw and fw > 0 and later == fw + bw
    print(f"blas_workspace_bytes {fw} ({'two per step, as fullshard models' if same else 'NOT as fullshard models: see NOTE [cuBLAS workspaces]'})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
