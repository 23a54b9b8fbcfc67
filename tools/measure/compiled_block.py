#!/usr/bin/env python3
"""What torch.compile of one Llama TransformerBlock saves for backward, and how many kernels
inductor generates (docs/ops.md, "Compiled block"; NOTE [Compiled block] in
core/model/compiled_block.cc).

    python tools/measure/compiled_block.py -o tools/measure/compiled_block.json   # a Python with torch (pip install torch; tools/oracle/README.md)

Builds torchtitan's Llama TransformerBlock (pytorch/torchtitan models/llama3: RMSNorm via
nn.RMSNorm, attention with wq / wk / wv / wo, RoPE, SDPA is_causal with enable_gqa, SwiGLU
w2(silu(w1(x)) * w3(x)), two residual adds) at tiny shapes, wraps it as torchtitan's
apply_compile does (torch.compile(block, fullgraph=True)), runs one forward and backward and
records:
- saved: the tensors the compiled forward saves (AOTAutograd's min-cut partitioner's forward
  graph outputs beyond the block output), each with shape, dtype and the aten op that produced
  it (read from the partitioned forward graph), and the same list as seen by
  torch.autograd.graph.saved_tensors_hooks around the compiled call (shape / dtype only);
- kernels: the generated kernel names of the forward and backward (inductor's cpp_fused_* /
  triton_* kernels; extern calls such as mm and SDPA are listed apart).
Cases: dtype bf16 and fp32, rope complex (torchtitan ComplexRoPE: view_as_complex(x.float())
* freqs_cis) and fused (rotate-half pairing with fp32 math, as fullshard's rope = fused).
Runs on the CPU; a compile takes 30-60 s per case.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys


def build(torch, nn, F, dim, n_heads, n_kv, ffn, rope_kind, eps=1e-5):
    hd = dim // n_heads

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq = nn.Linear(dim, n_heads * hd, bias=False)
            self.wk = nn.Linear(dim, n_kv * hd, bias=False)
            self.wv = nn.Linear(dim, n_kv * hd, bias=False)
            self.wo = nn.Linear(n_heads * hd, dim, bias=False)

        def forward(self, x, freqs):
            bs, seq, _ = x.shape
            xq = self.wq(x).view(bs, seq, n_heads, hd)
            xk = self.wk(x).view(bs, seq, n_kv, hd)
            xv = self.wv(x).view(bs, seq, n_kv, hd)
            if rope_kind == "complex":
                fc = freqs  # complex64 [seq, hd/2]
                q_ = torch.view_as_complex(xq.float().reshape(bs, seq, n_heads, -1, 2))
                k_ = torch.view_as_complex(xk.float().reshape(bs, seq, n_kv, -1, 2))
                f = fc.view(1, seq, 1, hd // 2)
                xq = torch.view_as_real(q_ * f).flatten(3).type_as(xq)
                xk = torch.view_as_real(k_ * f).flatten(3).type_as(xk)
            else:
                cos, sin = freqs  # fp32 [seq, hd]

                def rot(t):
                    tf = t.float()
                    x1, x2 = tf[..., : hd // 2], tf[..., hd // 2:]
                    r = torch.cat((-x2, x1), dim=-1)
                    return (tf * cos.view(1, seq, 1, hd) + r * sin.view(1, seq, 1, hd)).type_as(t)

                xq, xk = rot(xq), rot(xk)
            o = F.scaled_dot_product_attention(xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2),
                                               is_causal=True, enable_gqa=True)
            o = o.transpose(1, 2).contiguous().view(bs, seq, -1)
            return self.wo(o)

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(dim, ffn, bias=False)
            self.w2 = nn.Linear(ffn, dim, bias=False)
            self.w3 = nn.Linear(dim, ffn, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class TransformerBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = Attention()
            self.feed_forward = FeedForward()
            self.attention_norm = nn.RMSNorm(dim, eps=eps)
            self.ffn_norm = nn.RMSNorm(dim, eps=eps)

        def forward(self, x, freqs):
            h = x + self.attention(self.attention_norm(x), freqs)
            return h + self.feed_forward(self.ffn_norm(h))

    return TransformerBlock()


def freqs_for(torch, seq, hd, rope_kind, theta=500000.0):
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    ang = torch.outer(torch.arange(seq, dtype=torch.float32), inv)  # [seq, hd/2]
    if rope_kind == "complex":
        return torch.polar(torch.ones_like(ang), ang)
    emb = torch.cat((ang, ang), dim=-1)
    return (emb.cos(), emb.sin())


def producer(node):
    """The aten op behind a saved forward-graph node."""
    t = node.target
    name = getattr(t, "__name__", None) or str(t)
    return name


def run_case(torch, nn, F, args, dtype_name, rope_kind):
    import torch._inductor.compile_fx as cfx
    from torch._inductor.utils import run_and_get_code

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    B, S, D, H, KV, FF = args.batch, args.seq, args.dim, args.n_heads, args.n_kv_heads, args.ffn_dim
    hd = D // H
    torch.manual_seed(0)
    block = build(torch, nn, F, D, H, KV, FF, rope_kind).to(dtype)
    freqs = freqs_for(torch, S, hd, rope_kind)
    torch._dynamo.reset()
    captured = {}
    real_partition = cfx.min_cut_rematerialization_partition

    def spy(joint, joint_inputs, **kw):
        fwd, bwd = real_partition(joint, joint_inputs, **kw)
        captured["fwd"] = fwd
        captured["bwd"] = bwd
        return fwd, bwd

    cfx.min_cut_rematerialization_partition = spy
    try:
        compiled = torch.compile(block, fullgraph=True)
        x = torch.randn(B, S, D, dtype=dtype, requires_grad=True)
        hooked = []

        def pack(t):
            hooked.append({"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")})
            return t

        def step():
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = compiled(x, freqs)
            out.float().sum().backward()
            return out

        _, codes = run_and_get_code(step)
    finally:
        cfx.min_cut_rematerialization_partition = real_partition

    fwd = captured["fwd"]
    outs = list(fwd.graph.find_nodes(op="output"))[0].args[0]
    saved = []
    params = {}
    for name, p in block.named_parameters():
        params[tuple(p.shape)] = name
    for i, n in enumerate(outs):
        if i == 0:
            continue  # the block's output
        val = n.meta.get("val")
        if val is None or not hasattr(val, "shape"):
            saved.append({"node": n.name, "op": producer(n) if n.op == "call_function" else n.op})
            continue
        e = {
            "node": n.name,
            "op": producer(n) if n.op == "call_function" else n.op,
            "shape": [int(s) for s in val.shape],
            "dtype": str(val.dtype).replace("torch.", ""),
            "bytes": int(val.numel() * val.element_size()),
        }
        if n.op == "placeholder":
            e["op"] = "input"
        saved.append(e)

    def kernels(src):
        fused = sorted(set(re.findall(r"\b((?:cpp|triton)_fused_\w+)\s*=\s*async_compile", src)))
        externs = re.findall(r"extern_kernels\.(\w+)\(", src) + re.findall(r"torch\.ops\.aten\.(\w+)\.default\(", src)
        return {"fused": fused, "extern": externs}

    code_k = [kernels(c) for c in codes]
    if args.dump_code:
        for i, c in enumerate(codes):
            with open(f"{args.dump_code}/{dtype_name}-{rope_kind}-{'forward' if i == 0 else 'backward'}.py", "w") as f:
                f.write(c)
    return {
        "dtype": dtype_name,
        "rope": rope_kind,
        "shape": {"batch": B, "seq": S, "dim": D, "n_heads": H, "n_kv_heads": KV, "head_dim": hd, "ffn_dim": FF},
        "saved": saved,
        "saved_by_hooks": hooked,
        "forward_kernels": code_k[0] if code_k else None,
        "backward_kernels": code_k[1] if len(code_k) > 1 else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", help="write the JSON here")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--n-kv-heads", type=int, default=2)
    ap.add_argument("--ffn-dim", type=int, default=160)
    ap.add_argument("--dump-code", help="write inductor's generated code into this folder")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--ropes", default="complex,fused")
    args = ap.parse_args()
    for k in ("batch", "seq", "dim", "n_heads", "n_kv_heads", "ffn_dim"):
        if getattr(args, k) <= 0:
            sys.exit(f"compiled_block.py: --{k.replace('_', '-')} {getattr(args, k)} must be positive")
    if args.dim % args.n_heads or args.n_heads % args.n_kv_heads:
        sys.exit("compiled_block.py: --dim must divide by --n-heads and --n-heads by --n-kv-heads")
    # A cached compile skips the partitioner this script reads: compile afresh every time.
    os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
    os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError:
        sys.exit("compiled_block.py: needs torch (pip install torch, or run it with the Python of tools/oracle/README.md)")
    result = {"torch": torch.__version__, "device": "cpu", "cases": []}
    for dt in args.dtypes.split(","):
        for rk in args.ropes.split(","):
            if dt not in ("bf16", "fp32") or rk not in ("complex", "fused"):
                sys.exit(f"compiled_block.py: case {dt}/{rk}: dtypes are bf16, fp32; ropes complex, fused")
            case = run_case(torch, nn, F, args, dt, rk)
            result["cases"].append(case)
            print(f"== {dt} rope={rk}")
            for s in case["saved"]:
                print(f"  saved {s.get('node')}: {s.get('op')} {s.get('shape')} {s.get('dtype')}")
            print(f"  hooks saw {len(case['saved_by_hooks'])} tensors")
            print(f"  forward kernels: {case['forward_kernels']}")
            print(f"  backward kernels: {case['backward_kernels']}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
