#!/usr/bin/env python3
"""PyTorch eager + FSDP2 side of fullshard's GPU training benchmark (issue 9).

Builds the Llama of a fullshard scenario (an inline "model" object, arch "llama") in plain PyTorch
as torchtitan's Llama 3 does: nn.Embedding, nn.RMSNorm, attention with bias-free wq/wk/wv/wo, RoPE
in fullshard's rotate-half convention (docs/kernels.md), causal SDPA with native GQA (enable_gqa;
--gqa repeat_kv for torchtitan's copy), SwiGLU w1/w2/w3, final norm, untied output, and
F.cross_entropy on fp32 logits outside the model. Shards it with FSDP2 (fully_shard on each block,
then on the root, with the scenario's MixedPrecisionPolicy and reshard_after_forward), applies the
scenario's activation checkpointing, trains with AdamW + clip_grad_norm_ on random token ids and
reports tokens/s, MFU and peak memory. tools/gpu-check.sh runs it from the repository root right
after fullshard's run of the same scenario, and keeps the last line printed as the summary:

    python3 tools/bench/pytorch_fsdp2_llama.py --scenario scenarios/llama-1b-h100-bench.json --json OUT

As one process it makes its own 1-rank NCCL group; under torchrun it uses the launched world.
Needs only torch (written for 2.11) and a CUDA GPU. Not run on a GPU when written: checked by
reading, py_compile, and runs of a tiny model on CPU with torch 2.11 (gloo, CUDA calls stubbed).

MFU = tokens/s per GPU x model FLOPs per token / the GPU's dense bf16 peak, with FLOPs per token =
6 x (parameters - vocab_size x dim) + 12 x n_layers x dim x seq_len (torchtitan's
get_num_flop_per_token, as fullshard's simulator): 6N is forward + backward matmuls over every
non-embedding weight (output projection included); the second term is attention's QK^T and PV over
the full S x S matrix, although causal attention needs only about half of it (torchtitan counts it
so too). Activation-checkpointing recomputation is not counted.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import time
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

REPO = Path(__file__).resolve().parents[2]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Dense bf16 tensor-core peak (FLOP/s) by a substring of torch.cuda.get_device_name(); the first
# match wins. The SXM figures are those of scenarios/hardware/*.json.
PEAK_BF16 = [("H100 NVL", 835e12), ("H100 PCIe", 756e12), ("H100", 989.4e12), ("H200", 989.4e12),
             ("A100", 312e12), ("B200", 2250e12)]


def rope_tables(seq_len: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [S, hd] for rotate-half RoPE: element i and i + hd/2 rotate by pos * theta^(-2i/hd)
    (angles in double, tables in fp32, as fullshard's kernel)."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, S, H, hd]; cos/sin: [S, hd]. Computed in fp32, returned in x's dtype."""
    xf = x.float()
    x1, x2 = xf.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (xf * cos[:, None, :] + rotated * sin[:, None, :]).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: dict[str, Any], cos: torch.Tensor, sin: torch.Tensor, gqa: str) -> None:
        super().__init__()
        dim, self.n_heads, self.n_kv_heads = cfg["dim"], cfg["n_heads"], cfg["n_kv_heads"]
        self.head_dim, self.gqa = dim // self.n_heads, gqa
        bias = cfg["qkv_bias"]
        self.wq = nn.Linear(dim, self.n_heads * self.head_dim, bias=bias)
        self.wk = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=bias)
        self.wv = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=bias)
        self.wo = nn.Linear(self.n_heads * self.head_dim, dim, bias=False)
        # Buffers shared by every block (one allocation), kept out of forward's arguments so that
        # FSDP2's cast_forward_inputs leaves them in fp32.
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = apply_rope(self.wq(x).view(b, s, self.n_heads, self.head_dim), self.cos[:s], self.sin[:s])
        k = apply_rope(self.wk(x).view(b, s, self.n_kv_heads, self.head_dim), self.cos[:s], self.sin[:s])
        v = self.wv(x).view(b, s, self.n_kv_heads, self.head_dim)
        grouped = self.n_kv_heads != self.n_heads
        if grouped and self.gqa == "repeat_kv":  # torchtitan's repeat_kv: k/v copied to n_heads
            k, v = (t.repeat_interleave(self.n_heads // self.n_kv_heads, dim=2) for t in (k, v))
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, enable_gqa=grouped and self.gqa == "native")
        return self.wo(o.transpose(1, 2).contiguous().view(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, ffn_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, ffn_dim, bias=False)
        self.w2 = nn.Linear(ffn_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, ffn_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: dict[str, Any], cos: torch.Tensor, sin: torch.Tensor, gqa: str) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(cfg["dim"], eps=cfg["norm_eps"])
        self.attention = Attention(cfg, cos, sin, gqa)
        self.ffn_norm = nn.RMSNorm(cfg["dim"], eps=cfg["norm_eps"])
        self.feed_forward = FeedForward(cfg["dim"], cfg["ffn_dim"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, cfg: dict[str, Any], seq_len: int, gqa: str) -> None:
        super().__init__()
        cos, sin = rope_tables(seq_len, cfg["dim"] // cfg["n_heads"], cfg["rope_theta"])
        self.tok_embeddings = nn.Embedding(cfg["vocab_size"], cfg["dim"])
        self.layers = nn.ModuleList(TransformerBlock(cfg, cos, sin, gqa) for _ in range(cfg["n_layers"]))
        self.norm = nn.RMSNorm(cfg["dim"], eps=cfg["norm_eps"])
        self.output = nn.Linear(cfg["dim"], cfg["vocab_size"], bias=False)
        # fullshard's init (transformer.cc NOTE [Init]): N(0, 0.02), wo / w2 N(0, 0.02/sqrt(2L)).
        residual_std = 0.02 / math.sqrt(2 * cfg["n_layers"])
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif p.dim() == 1:  # RMSNorm weights
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, std=residual_std if name.endswith(("wo.weight", "w2.weight")) else 0.02)
        if cfg["tie_embeddings"]:
            self.output.weight = self.tok_embeddings.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def op_sac_context() -> tuple[Any, Any]:
    """torchtitan's op-level SAC policy: keep attention outputs and every other mm output
    (the 1st, 3rd, ... mm of the block: wq, wv, w1, w2), recompute everything else."""
    aten = torch.ops.aten
    save = {aten.mm.default}
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention"):
        if hasattr(aten, name):
            save.add(getattr(aten, name).default)
    mm_count = {"forward": 0, "recompute": 0}  # one counter per pass, fresh per checkpoint call

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        key = "recompute" if ctx.is_recompute else "forward"
        is_mm = func == aten.mm.default
        mm_count[key] += int(is_mm)
        keep = func in save and not (is_mm and mm_count[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class Checkpointed(nn.Module):
    """torch.utils.checkpoint (non-reentrant) around a block; fully_shard goes on this wrapper,
    so FSDP's hooks stay outside the checkpointed region (as torchtitan)."""

    def __init__(self, block: nn.Module, op_selective: bool) -> None:
        super().__init__()
        self.block, self.op_selective = block, op_selective

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        extra = {"context_fn": op_sac_context} if self.op_selective else {}
        return checkpoint(self.block, x, use_reentrant=False, preserve_rng_state=False, **extra)


def fail(msg: str) -> NoReturn:
    raise SystemExit(f"pytorch_fsdp2_llama: {msg}")


def dtype(mp: dict[str, Any], key: str) -> torch.dtype | None:
    name = mp.get(key)
    if name is not None and name not in DTYPES:
        fail(f"fsdp.mixed_precision.{key} is {name!r}: write fp32, bf16, fp16 or null")
    return DTYPES[name] if name is not None else None


# model.implementation.attention -> the one SDPA backend PyTorch may pick (sdpa_kernel), as
# fullshard's model runs that backend's kernels and allocations.
SDPA_BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                 "efficient": SDPBackend.EFFICIENT_ATTENTION}


def load_scenario(path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The scenario's model (fullshard's ModelConfig defaults filled in), training and fsdp."""
    s = json.loads(path.read_text())
    m = s.get("model")
    if not isinstance(m, dict) or m.get("arch") != "llama" or "hf_config" in m:
        fail(f"{path}: model must be an inline object with \"arch\": \"llama\" (zoo names and hf_config are not read)")
    cfg = {"n_kv_heads": m.get("n_heads"), "norm_eps": 1e-5, "rope_theta": 10000.0, "tie_embeddings": False,
           "qkv_bias": False, **m}
    if cfg.get("linear_bias") or cfg["dim"] % cfg["n_heads"] or cfg["n_heads"] % cfg["n_kv_heads"] \
            or cfg["dim"] // cfg["n_heads"] % 2:
        fail("model: needs no linear_bias, an even head_dim = dim / n_heads, n_heads a multiple of n_kv_heads")
    impl = m.get("implementation", {})
    attention = impl.get("attention", "flash") if isinstance(impl, dict) else None
    if attention not in SDPA_BACKENDS:
        fail("model.implementation: this benchmark reads only an object's \"attention\" (flash, cudnn or efficient),"
             f" not {impl!r}")
    cfg["attention"] = attention
    t, f = s["training"], s.get("fsdp", {})
    if f.get("cpu_offload") or f.get("forward_prefetch", 0) or f.get("backward_prefetch", 1) > 1 or t.get("rank_batch"):
        fail("fsdp.cpu_offload, fsdp.*_prefetch and training.rank_batch are not supported by this benchmark")
    return cfg, t, f


def init_distributed() -> tuple[int, int, int]:
    if not ("RANK" in os.environ and "WORLD_SIZE" in os.environ):  # not under torchrun: a 1-rank group
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    rank, world, local = (int(os.environ.get(k, "0")) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world,
                            device_id=torch.device("cuda", local))
    return rank, world, local


def shard(model: Transformer, fs: dict[str, Any], world: int, ac_mode: str, ac_every: int, compile_: bool) -> None:
    """torchtitan's order: activation checkpointing, compile, then fully_shard on blocks, then root."""
    mp = fs.get("mixed_precision", {})
    mp_policy = MixedPrecisionPolicy(param_dtype=dtype(mp, "param_dtype"), reduce_dtype=dtype(mp, "reduce_dtype"),
                                     output_dtype=dtype(mp, "output_dtype"),
                                     cast_forward_inputs=bool(mp.get("cast_forward_inputs", True)))
    shape = tuple(fs.get("mesh", {}).get("shape", [world]))
    if math.prod(shape) != world:
        shape = (world,)  # launched on another world size than the scenario's: FSDP over all of it
    names = ("shard",) if len(shape) == 1 else ("replicate", "shard")
    kw: dict[str, Any] = {"mesh": init_device_mesh("cuda", shape, mesh_dim_names=names), "mp_policy": mp_policy}
    if fs.get("reshard_after_forward") is not None:  # absent / null: FSDP2's own default per unit
        kw["reshard_after_forward"] = fs["reshard_after_forward"]
    for i, block in enumerate(list(model.layers)):
        if ac_mode in ("full", "selective_op") or (ac_mode == "selective_layer" and i % ac_every == 0):
            block = Checkpointed(block, op_selective=ac_mode == "selective_op")
        if compile_:  # the compiled module replaces the block and FSDP goes on it, as torchtitan
            block = torch.compile(block)
        model.layers[i] = block
    if fs.get("units", "blocks") == "blocks":
        for block in model.layers:
            fully_shard(block, **kw)
    fully_shard(model, **kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="scenarios/llama-1b-h100-bench.json")
    ap.add_argument("--steps", type=int, help="timed steps (default: the scenario's training.steps)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before them (default 3)")
    ap.add_argument("--compile", action="store_true", help="torch.compile each block")
    ap.add_argument("--gqa", choices=["native", "repeat_kv"], default="native")
    ap.add_argument("--json", metavar="OUT", help="write the results to this JSON file")
    ap.add_argument("--peak-tflops", type=float, help="dense bf16 peak of one GPU in TFLOP/s")
    args = ap.parse_args()
    path = Path(args.scenario)
    if not path.exists() and not path.is_absolute() and (REPO / path).exists():
        path = REPO / path
    if not path.is_file():
        fail(f"no scenario file {args.scenario}")
    cfg, tr, fs = load_scenario(path)
    seq, accum, batch = int(tr["seq_len"]), int(tr.get("grad_accum_steps", 1)), int(tr.get("batch_per_rank", 1))
    steps = args.steps if args.steps is not None else int(tr.get("steps", 1))
    if steps < 1 or args.warmup < 0:
        fail("--steps must be >= 1 and --warmup >= 0")
    ac = tr.get("activation_checkpointing", "none")
    ac_mode, ac_every = (ac, 1) if isinstance(ac, str) else (ac["mode"], int(ac.get("every", 1)))
    if ac_mode not in ("none", "full", "selective_layer", "selective_op"):
        fail(f"training.activation_checkpointing mode {ac_mode!r} is unknown")
    opt = {"lr": 3e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "max_grad_norm": 1.0,
           "implementation": "fused", **tr.get("optimizer", {})}  # fullshard's defaults, but fused
    if opt["implementation"] not in ("fused", "foreach"):
        fail("training.optimizer.implementation must be fused or foreach")
    if not torch.cuda.is_available():
        fail("needs a CUDA GPU")
    rank, world, local = init_distributed()

    seed = int(tr.get("seed", 0))
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = Transformer(cfg, seq, args.gqa)
    n_params = sum(p.numel() for p in model.parameters())
    flops_per_token = 6 * (n_params - cfg["vocab_size"] * cfg["dim"]) + 12 * cfg["n_layers"] * cfg["dim"] * seq
    shard(model, fs, world, ac_mode, ac_every, args.compile)
    optim = torch.optim.AdamW(model.parameters(), lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"],
                              weight_decay=opt["weight_decay"], **{opt["implementation"]: True})
    gen = torch.Generator(device="cuda").manual_seed(seed + rank)
    data = []  # (inputs, labels = inputs shifted by one), made before any timed step
    for _ in range((args.warmup + steps) * accum):
        t = torch.randint(0, cfg["vocab_size"], (batch, seq + 1), device="cuda", generator=gen)
        data.append((t[:, :-1].contiguous(), t[:, 1:].contiguous()))
    # Peaks count from here (training steps only): the full-size fp32 model built before sharding
    # is gone (torchtitan builds it on the meta device; fullshard never materialises it).
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()

    def train_step(step: int) -> torch.Tensor:
        total = torch.zeros((), device="cuda")
        for micro in range(accum):
            inputs, labels = data[step * accum + micro]
            model.set_requires_gradient_sync(micro == accum - 1)
            logits = model(inputs)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1)) / accum
            del logits
            loss.backward()
            total += loss.detach()
        if opt["max_grad_norm"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), opt["max_grad_norm"], foreach=True)
        optim.step()
        optim.zero_grad(set_to_none=True)
        return total

    device_name = torch.cuda.get_device_name(local)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else next((f for k, f in PEAK_BF16 if k in device_name), None)
    tokens_per_step = batch * seq * accum * world
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"pytorch eager + FSDP2: {path.name}, {n_params / 1e9:.3f} B params, {world} rank(s), batch {batch} x seq {seq}"
        f" x accum {accum}, AC {ac_mode}, AdamW {opt['implementation']}, GQA {args.gqa}, SDPA {cfg['attention']},"
        f" compile {args.compile},"
        f" {device_name}", flush=True)
    times: list[float] = []
    # One SDPA backend, around backward too: activation checkpointing recomputes forwards there.
    with sdpa_kernel(SDPA_BACKENDS[cfg["attention"]]):
        for step in range(args.warmup + steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = train_step(step)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            timed = step >= args.warmup
            times += [dt] if timed else []
            say(f"  {'step' if timed else 'warmup'} {step + 1 - (args.warmup if timed else 0)}: loss {loss.item():.4f}"
                f" | {dt:.4f} s | {tokens_per_step / dt:.0f} tok/s", flush=True)

    step_time = statistics.median(times)
    tokens_per_s = tokens_per_step / step_time
    mfu = tokens_per_s / world * flops_per_token / peak if peak else None
    result = {"tokens_per_s": tokens_per_s, "step_time_s": step_time, "mfu": mfu, "peak_flops": peak,
              "model_flops_per_token": flops_per_token, "torch_version": torch.__version__,
              "device_name": device_name, "max_memory_allocated": torch.cuda.max_memory_allocated(),
              "max_memory_reserved": torch.cuda.max_memory_reserved(), "batch": batch, "seq_len": seq,
              "params": n_params, "world_size": world, "grad_accum_steps": accum, "activation_checkpointing": ac_mode,
              "optimizer": opt["implementation"], "gqa": args.gqa, "attention": cfg["attention"], "compile": args.compile,
              "warmup_steps": args.warmup, "step_times_s": times}
    if rank == 0 and args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    dist.destroy_process_group()
    gib = 1024.0 ** 3
    mfu_text = f"MFU {100 * mfu:.1f}%" if mfu is not None else "MFU n/a (unknown GPU: give --peak-tflops)"
    say(f"pytorch {torch.__version__} eager + FSDP2: {tokens_per_s:.0f} tokens/s, median step {step_time:.4f} s over"
        f" {len(times)} steps, {mfu_text}, peak allocated {result['max_memory_allocated'] / gib:.2f} GiB,"
        f" reserved {result['max_memory_reserved'] / gib:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
