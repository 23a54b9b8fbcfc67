#!/usr/bin/env python3
"""Times a model's kernels on this machine and writes the CSV `fullshard calibrate` reads
(docs/cost-model.md, "Measuring a GPU").

    python3 tools/measure/measure.py --scenario scenarios/llama3.1-8b-fsdp8-h100.json \
        --models-json models.json -o measured.csv
    fullshard calibrate measured.csv --hardware h100 -o scenarios/hardware/h100-mine.json

It times, with CUDA events after warm-up: the GEMMs of the model's linears in the forward,
grad-input and grad-weight layouts; causal SDPA (flash) forward and backward at the model's head
dim and sequence length; the eager elementwise and reduction kernels fullshard models (eager and
fused RMSNorm, SiLU * mul, the residual add, casts, log_softmax of the loss), each kernel alone
and each eager chain whole with its kernel count from torch.profiler; a device-to-device copy;
H2D / D2H copies from pinned and pageable memory; the device time per kernel of a chain of tiny
kernels and the host time of one eager op; and, under torchrun with several GPUs, NCCL all-gather and
reduce-scatter through torch.distributed. A header block records the date, GPU, driver, torch
and CUDA versions, clocks and power limit, and the device total as PyTorch sees it
(torch.cuda.get_device_properties().total_memory) beside nvidia-smi's memory.total.

Model: --scenario S.json (its model, training.seq_len, batch_per_rank and
fsdp.mixed_precision.param_dtype; a model named from the zoo needs --models-json, the output of
`fullshard models --json`), or --dim/--n-heads/--n-kv-heads/--ffn-dim/--vocab-size with --seq
and --batch. Needs torch only to time: --list prints the plan and --dry-run writes the CSV with
synthetic roofline times (marked so in its header) without importing torch; --device cpu runs a
smoke test on the CPU. Bad input: one line naming the flag or field, exit 2.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan import (DTYPE_BYTES, CollectiveRow, Model, PlanError, Sample, build_plan, format_plan,  # noqa: E402
                  model_from_dict, write_csv)


def fail(where: str, what: str, fix: str) -> "NoReturn":  # noqa: F821
    print(f"measure.py: {where}: {what}; {fix}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------- input
def load_json(path: str, flag: str):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        fail(flag, f"file not found: '{path}'", "give the path of an existing file")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        fail(flag, f"'{path}' is not valid JSON ({e})", "give a JSON file")
    except OSError as e:
        fail(flag, f"cannot read '{path}' ({e.strerror})", "check the path and its permissions")


def resolve_model(args) -> tuple[Model, int, int, str]:
    """(model, batch, seq, dtype) from --scenario or the dimension flags."""
    if args.scenario:
        s = load_json(args.scenario, "--scenario")
        if not isinstance(s, dict) or "model" not in s:
            fail("--scenario", f"'{args.scenario}' has no \"model\"", "give a fullshard scenario file")
        model = s["model"]
        if isinstance(model, str) or (isinstance(model, dict) and "dim" not in model):
            name = model if isinstance(model, str) else model.get("name")
            if not args.models_json:
                fail("--models-json", f"is missing, and the scenario names the zoo model '{name}'",
                     "run `fullshard models --json > models.json` and pass --models-json models.json, or give --dim etc.")
            zoo = load_json(args.models_json, "--models-json")
            entry = next((m for m in zoo if isinstance(m, dict) and m.get("name") == name), None) if isinstance(zoo, list) else None
            if entry is None:
                fail("model", f"'{name}' is not in {args.models_json}", "give the output of `fullshard models --json`")
            model = entry
        elif not isinstance(model, dict):
            fail("model", f"is {json.dumps(model)}", "give a zoo name or an inline model object")
        m = model_from_dict(model, "model")
        training = s.get("training", {}) if isinstance(s.get("training"), dict) else {}
        seq = args.seq or training.get("seq_len")
        batch = args.batch or training.get("batch_per_rank", 1)
        mp = (s.get("fsdp") or {}).get("mixed_precision") or {}
        dtype = args.dtype or mp.get("param_dtype") or "fp32"
    else:
        if not args.dim:
            fail("--dim", "is missing", "give --scenario S.json or the model's --dim, --n-heads, --ffn-dim, --vocab-size")
        m = model_from_dict({"name": "model", "arch": args.arch, "dim": args.dim, "n_heads": args.n_heads or 0,
                             "n_kv_heads": args.n_kv_heads or args.n_heads or 0,
                             "ffn_dim": args.ffn_dim or 4 * args.dim, "vocab_size": args.vocab_size}, "--")
        seq, batch, dtype = args.seq, args.batch or 1, args.dtype or "bf16"
    if not isinstance(seq, int) or seq < 1:
        fail("--seq", "is missing" if seq is None else f"is {seq}", "give the sequence length, e.g. --seq 8192 (or training.seq_len in the scenario)")
    if not isinstance(batch, int) or batch < 1:
        fail("--batch", "is missing" if batch is None else f"is {batch}", "give sequences per rank, e.g. --batch 1")
    if dtype not in DTYPE_BYTES:
        fail("--dtype", f"is '{dtype}'", "use bf16, fp16 or fp32")
    return m, batch, seq, dtype


# ---------------------------------------------------------------- synthetic times (--dry-run)
def roofline_times(samples: list[Sample], peak_flops: float, hbm: float, efficiency: float) -> None:
    """--dry-run: time = (max(FLOPs / peak, bytes / HBM) + a 1 us kernel gap) / efficiency; copies
    at 50 GB/s, the kernel gap 1 us and an eager op 4 us, all / efficiency. Not a measurement: the CSV
    says so; it exists to test the writer and `fullshard calibrate` without a GPU or torch."""
    synthetic_direct = {"kernel_gap": 1e-6, "eager_op": 4e-6}  # seconds, before / efficiency (an eager op
    # faster than the norms, which NOTE [Launch-bound samples] would otherwise leave out)
    for s in samples:
        peak = peak_flops if s.op not in ("vector", "norm", "norm_backward") else peak_flops / 16
        gaps = 2 if s.op == "norm_backward" else 1  # the norm backward's two kernels
        if s.op.startswith("copy_"):
            s.time_s = s.bytes / 50e9 / efficiency  # a PCIe Gen5 x16 link's 50 GB/s
        elif s.op in synthetic_direct:
            s.time_s = synthetic_direct[s.op] / efficiency
        else:  # a kernel timed back to back includes the gap between kernels
            s.time_s = (max(s.flops / peak, s.bytes / hbm) + gaps * synthetic_direct["kernel_gap"]) / efficiency


# ---------------------------------------------------------------- machine header
def nvidia_smi(fields: str) -> str:
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=30)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else "unavailable"
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"


def machine_header(torch, device: str, dry_run: bool) -> list[str]:
    h = [f"fullshard calibration samples written by tools/measure/measure.py",
         f"date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
         f"host: {platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()})"]
    if dry_run:
        h.append("DRY RUN: synthetic roofline times, not measurements")
        return h
    h.append(f"torch: {torch.__version__} (CUDA {torch.version.cuda})")
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        smi_total = nvidia_smi("memory.total")
        h += [f"gpu: {p.name} ({p.multi_processor_count} SMs, compute capability {p.major}.{p.minor})",
              f"driver: {nvidia_smi('driver_version')}",
              f"clocks (sm max, mem max, sm now MHz): {nvidia_smi('clocks.max.sm,clocks.max.mem,clocks.sm')}",
              f"power limit (enforced, default W): {nvidia_smi('power.limit,power.default_limit')}",
              f"total_memory (torch.cuda.get_device_properties): {p.total_memory} bytes = "
              f"{p.total_memory / 2**20:.0f} MiB",
              f"memory.total (nvidia-smi): {smi_total}"]
    else:
        h.append(f"device: cpu ({torch.get_num_threads()} threads): a smoke test, not a GPU measurement")
    return h


# ---------------------------------------------------------------- timing
class Timer:
    def __init__(self, torch, device: str, warmup: int, iters: int) -> None:
        self.torch, self.device, self.warmup, self.iters = torch, device, warmup, iters

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def seconds(self, fn, iters: int | None = None, repeats: int = 3) -> float:
        """Device seconds per call of fn: `repeats` blocks of `iters` calls back to back after
        warm-up, each timed with CUDA events (wall clock on the CPU); the median block."""
        import statistics
        import time
        iters = iters or self.iters
        for _ in range(self.warmup):
            fn()
        self.sync()
        blocks = []
        # NOTE [Device-bound timing]: a kernel shorter than the host's launch (~9 us a call from
        # Python on the 2026-11-28 H200 run) would time the host's launch rate, not the device:
        # the block is queued behind a device sleep longer than the host takes to queue it, so
        # the device runs its kernels back to back (keep a block under ~1000 launches: the
        # launch queue's depth).
        host_block = 0.0
        if self.device == "cuda" and hasattr(self.torch.cuda, "_sleep"):
            t = time.perf_counter()
            for _ in range(iters):
                fn()
            host_block = time.perf_counter() - t
            self.sync()
        for _ in range(repeats):
            if self.device == "cuda":
                a, b = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
                if host_block > 0:
                    self.torch.cuda._sleep(int(min(2.0 * host_block + 1e-3, 2.0) * 2.0e9))  # cycles at <= 2 GHz
                a.record()
                for _ in range(iters):
                    fn()
                b.record()
                b.synchronize()
                blocks.append(a.elapsed_time(b) * 1e-3 / iters)
            else:
                t = time.perf_counter()
                for _ in range(iters):
                    fn()
                blocks.append((time.perf_counter() - t) / iters)
        return statistics.median(blocks)

    def host_seconds(self, fn, iters: int) -> float:
        """Host wall seconds per call without waiting for the device (launch + dispatch)."""
        import time
        for _ in range(self.warmup):
            fn()
        self.sync()
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        dt = time.perf_counter() - t
        self.sync()
        return dt / iters

    def kernel_count(self, fn) -> int | None:
        """CUDA kernels one call of fn launches (torch.profiler); None where unavailable."""
        if self.device != "cuda":
            return None
        try:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                self.sync()
            return sum(1 for e in prof.events() if e.device_type.name == "CUDA")
        except Exception:  # noqa: BLE001 - the count is informative only
            return None


def time_plan(torch, timer: Timer, m: Model, samples: list[Sample], batch: int, seq: int, dtype: str,
              notes: list[str]) -> None:
    F = torch.nn.functional
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    dev = timer.device
    tokens = batch * seq

    def rand(*shape, dtype=dt):
        return torch.randn(*shape, device=dev, dtype=dtype)

    # Each GEMM with the operand layouts autograd gives cuBLAS (row-major tensors, transposed
    # views): forward x @ W.t() (W is [out, in]), grad-input dy @ W, grad-weight dy.t() @ x.
    for s in samples:
        if s.op == "matmul":
            layout = s.label.rsplit(" ", 1)[1]
            if layout == "forward":
                a, b = rand(s.m, s.k), rand(s.n, s.k).t()
            elif layout == "grad_input":
                a, b = rand(s.m, s.k), rand(s.k, s.n)
            else:
                a, b = rand(s.k, s.m).t(), rand(s.k, s.n)
            s.time_s = timer.seconds(lambda: torch.mm(a, b))
            del a, b
    hd, h, kv = m.head_dim, m.n_heads, m.n_kv_heads
    q = rand(batch, h, seq, hd).requires_grad_()
    k = rand(batch, kv, seq, hd).requires_grad_()
    v = rand(batch, kv, seq, hd).requires_grad_()
    gqa = {"enable_gqa": True} if kv != h else {}
    # The flash backend only, as the profile's attention tables describe it: PyTorch's default
    # dispatch may pick another backend on Hopper (the 2026-11-28 H200 run did not pin it and
    # timed 601 TFLOP/s forward at seq 8192, hd 128, above FlashAttention-2's published rates;
    # which backend ran was not recorded).
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
    out = sdpa()
    grad = torch.randn_like(out)
    fwd = timer.seconds(sdpa)
    both = timer.seconds(lambda: torch.autograd.grad(sdpa(), (q, k, v), grad))
    for s in samples:
        if s.op == "attention":
            s.time_s = fwd
        elif s.op == "attention_backward":
            s.time_s = max(both - fwd, 1e-3 * both)
    del q, k, v, out, grad

    d, f = m.dim, m.ffn_dim
    x, w = rand(tokens, d), rand(d)
    x32 = x.float()
    r32 = torch.rand(tokens, 1, device=dev) + 0.5
    ms = x32.pow(2).mean(-1, keepdim=True)
    g1, g3 = (rand(tokens, f), rand(tokens, f)) if m.arch == "llama" else (rand(tokens, 4 * d), None)
    y = rand(tokens, d)
    dst = torch.empty_like(x)
    logits = torch.randn(tokens, m.vocab_size, device=dev)
    labels = torch.randint(0, m.vocab_size, (tokens,), device=dev)
    kernels = {
        "rmsnorm_eager float": lambda: x.float(),
        "rmsnorm_eager pow": lambda: x32.pow(2),
        "rmsnorm_eager mean": lambda: x32.mean(-1, keepdim=True),
        "rmsnorm_eager add_eps": lambda: ms + 1e-5,
        "rmsnorm_eager rsqrt": lambda: torch.rsqrt(ms),
        "rmsnorm_eager mul": lambda: x32 * r32,
        "rmsnorm_eager type_as": lambda: x32.type_as(x),
        "rmsnorm_eager mul_weight": lambda: x * w,
        "rmsnorm_fused": lambda: F.rms_norm(x, (d,), w, 1e-5),
        "swiglu silu": lambda: F.silu(g1),
        "swiglu mul": lambda: g1 * g3,
        "gelu": lambda: F.gelu(g1, approximate="tanh"),
        "residual add": lambda: x + y,
        "cast to fp32": lambda: x.to(torch.float32),
        "d2d copy": lambda: dst.copy_(x),
        "log_softmax fp32 logits": lambda: F.log_softmax(logits, -1),
    }
    for s in samples:
        if s.op == "vector":
            s.time_s = timer.seconds(kernels[s.label])
    # The fused norm's forward, and its backward alone (the graph kept, autograd.grad replayed).
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
    yg = F.rms_norm(xg, (d,), wg, 1e-5)
    dy = torch.randn_like(yg)
    norm_times = {"norm": timer.seconds(kernels["rmsnorm_fused"]),
                  "norm_backward": timer.seconds(lambda: torch.autograd.grad(yg, (xg, wg), dy, retain_graph=True))}
    for s in samples:
        if s.op in norm_times:
            s.time_s = norm_times[s.op]
    del xg, wg, yg, dy

    def rmsnorm_eager():  # torchtitan's RMSNorm._norm(x.float()).type_as(x) * weight
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * w

    chains = {"rmsnorm_eager": rmsnorm_eager, "rmsnorm_fused": kernels["rmsnorm_fused"],
              "cross_entropy": lambda: F.cross_entropy(logits, labels)}
    if m.arch == "llama":
        chains["swiglu"] = lambda: F.silu(g1) * g3
    for name, fn in chains.items():
        t, n = timer.seconds(fn), timer.kernel_count(fn)
        notes.append(f"chain {name}: {t * 1e6:.2f} us per call, "
                     f"{'kernel count unavailable' if n is None else f'{n} kernels (torch.profiler)'}")
    del x, w, x32, g1, g3, y, dst, logits

    # Direct samples (NOTE [Direct samples] in simulator/cost/calibrate.h). Launch latency: a
    # chain of tiny dependent kernels (device time per kernel), and the host time of one eager op
    # (dispatch + launch), the host's cost a CPU-bound step shows as idle device time.
    tiny = torch.zeros(1, device=dev)
    chain_len = 500  # NOTE [Device-bound timing]: under the launch queue's depth

    def tiny_chain():
        for _ in range(chain_len):
            tiny.add_(1)
    # GPUs only: on the CPU the host is the device, and every kernel time above already holds
    # its dispatch (the cpu profile's kernel_gap_s and eager_dispatch_s are 0).
    by_label = {s.label: s for s in samples}
    if dev == "cuda":
        by_label["kernel_gap"].time_s = timer.seconds(tiny_chain, iters=1, repeats=5) / chain_len
        by_label["eager_op"].time_s = timer.host_seconds(lambda: tiny.add_(1), iters=2000)
        # Host <-> device copies (CPU offload), one activation-sized buffer.
        nbytes = int(by_label["copy_pinned h2d"].bytes)
        gpu = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        for kind, pin in (("pinned", True), ("pageable", False)):
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
            by_label[f"copy_{kind} h2d"].time_s = timer.seconds(lambda: gpu.copy_(host, non_blocking=pin), iters=10)
            by_label[f"copy_{kind} d2h"].time_s = timer.seconds(lambda: host.copy_(gpu, non_blocking=pin), iters=10)
            del host
        del gpu


def time_collectives(torch, timer: Timer, sizes: list[int], dtype: str) -> list[CollectiveRow]:
    """NCCL all-gather and reduce-scatter over the torchrun world (every rank calls this)."""
    import torch.distributed as dist
    world = dist.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    e = DTYPE_BYTES[dtype]
    rows = []
    for size in sizes:
        n = max(world, size // e // world * world)
        full = torch.empty(n, dtype=dt, device="cuda")
        shard = torch.empty(n // world, dtype=dt, device="cuda")
        for name, fn in (("all_gather", lambda: dist.all_gather_into_tensor(full, shard)),
                         ("reduce_scatter", lambda: dist.reduce_scatter_tensor(shard, full))):
            dist.barrier()
            t = timer.seconds(fn, iters=20)
            rows.append(CollectiveRow(name, world // local, local, n * e, t * 1e6))
    return rows


# ---------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", help="fullshard scenario: model, seq_len, batch_per_rank, param_dtype")
    p.add_argument("--models-json", help="output of `fullshard models --json` (for a scenario naming a zoo model)")
    p.add_argument("--arch", default="llama", choices=["llama", "gpt2"])
    for flag in ("--dim", "--n-heads", "--n-kv-heads", "--ffn-dim", "--seq", "--batch"):
        p.add_argument(flag, type=int)
    p.add_argument("--vocab-size", type=int, default=128256)
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES))
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--collective-sizes", default="1048576,16777216,268435456",
                   help="NCCL buffer sizes in bytes (under torchrun with several GPUs)")
    p.add_argument("-o", "--output", help="CSV to write (default: stdout)")
    p.add_argument("--list", action="store_true", help="print what would be timed; needs no torch")
    p.add_argument("--dry-run", action="store_true", help="write the CSV with synthetic roofline times; needs no torch")
    p.add_argument("--peak-flops", type=float, default=989.4e12, help="--dry-run: tensor-core peak FLOP/s")
    p.add_argument("--hbm-bandwidth", type=float, default=3.35e12, help="--dry-run: bytes/s")
    p.add_argument("--efficiency", type=float, default=0.6, help="--dry-run: fraction of the roofline reached")
    args = p.parse_args(argv)
    try:
        m, batch, seq, dtype = resolve_model(args)
        samples = build_plan(m, batch, seq, dtype)
    except PlanError as e:
        fail(e.where, e.what, e.fix)
    if args.list:
        print(f"{m.name}: dim {m.dim}, heads {m.n_heads}/{m.n_kv_heads}, ffn {m.ffn_dim}, vocab {m.vocab_size}; "
              f"batch {batch} x seq {seq}, {dtype}")
        print(format_plan(samples))
        return 0
    for flag, v in (("--warmup", args.warmup), ("--iters", args.iters)):
        if v < (0 if flag == "--warmup" else 1):
            fail(flag, f"is {v}", "give a positive count")
    if not 0 < args.efficiency <= 1:
        fail("--efficiency", f"is {args.efficiency}", "give a fraction in (0, 1]")
    try:
        sizes = [int(float(x)) for x in args.collective_sizes.split(",") if x.strip()]
    except ValueError:
        fail("--collective-sizes", f"is '{args.collective_sizes}'", "give byte counts separated by commas")
    if any(x < 1 for x in sizes):
        fail("--collective-sizes", f"is '{args.collective_sizes}'", "give positive byte counts")

    notes: list[str] = []
    collectives: list[CollectiveRow] = []
    torch = None
    if args.dry_run:
        roofline_times(samples, args.peak_flops, args.hbm_bandwidth, args.efficiency)
    else:
        try:
            import torch
        except ImportError:
            fail("torch", "is not installed", "run on a machine with PyTorch, or use --list / --dry-run")
        if args.device == "cuda" and not torch.cuda.is_available():
            fail("--device", "is cuda but torch sees no GPU", "run on a GPU machine, or --device cpu for a smoke test")
        if args.device == "cpu":
            # One core per rank, as the cpu profile models a rank (docs/hardware.md); on a
            # shared host more OpenMP threads than free cores stall in barriers for milliseconds.
            torch.set_num_threads(1)
        timer = Timer(torch, args.device, args.warmup, args.iters)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        if world > 1 and args.device == "cuda":
            import torch.distributed as dist
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group("nccl")
            collectives = time_collectives(torch, timer, sizes, dtype)
            dist.destroy_process_group()
            if rank != 0:
                return 0
        time_plan(torch, timer, m, samples, batch, seq, dtype, notes)
    header = machine_header(torch, args.device, args.dry_run) + [
        f"model: {m.name} (arch {m.arch}, dim {m.dim}, heads {m.n_heads}/{m.n_kv_heads}, ffn {m.ffn_dim}, "
        f"vocab {m.vocab_size}); batch {batch} x seq {seq}, {dtype}; warmup {args.warmup}, iters {args.iters}"]
    if args.output:
        try:
            with open(args.output, "w") as out:
                write_csv(out, header, samples, collectives, notes)
        except OSError as e:
            fail("--output", f"cannot write '{args.output}' ({e.strerror})", "give a writable path")
        print(f"measure.py: wrote {sum(s.time_s is not None for s in samples)} kernel and {len(collectives)} "
              f"collective samples to {args.output}")
    else:
        write_csv(sys.stdout, header, samples, collectives, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
