"""What tools/measure/measure.py times, and the CSV it writes: pure Python, no torch.

A *plan* is the list of kernel samples of one model at one (batch, seq, dtype): the GEMMs of
its linears in the three layouts a training step runs (forward, grad-input, grad-weight), causal
flash attention forward and backward at its head dim and sequence length, the eager elementwise
and reduction kernels of the eager chains fullshard records (model.implementation rms_norm = eager,
rope = complex: core/model/eager_norm.cc), the fused norms (norm_memory_efficiency), a
device-to-device copy, and the direct samples: launch latency, eager dispatch, host copies. Each sample carries what `fullshard calibrate` reads for it
(simulator/cost/calibration_csv.cc): op class, dtype, FLOPs, bytes and the GEMM's M, K, N or
attention's seq and head dim, with FLOPs and bytes counted as fullshard's ops count them
(core/model/ops.cc: a GEMM is 2 M K N; causal attention 2 B H S^2 D forward, 2.5x that backward).

NOTE [Measured CSV]: the CSV is calibrate's format, nothing more: one header row of its columns,
one row per sample, `#` lines for everything calibrate does not read (the machine, whole eager
chains with their kernel counts). Every
row is one kernel, as calibrate assumes; eager chains are therefore timed kernel by kernel as
rows and as a whole in a comment.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Iterable

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# Columns of calibrate's CSV (simulator/cost/calibration_csv.cc kCollectiveColumns +
# kKernelColumns), in the order measure.py writes them.
CSV_COLUMNS = ["collective", "nodes", "gpus_per_node", "bytes", "time_us", "op", "dtype", "flops", "time_s",
               "m", "k", "n", "seq", "head_dim", "out_dtype"]


class PlanError(Exception):
    """Bad input: `where` is the flag or field, `what` the problem, `fix` what to do."""

    def __init__(self, where: str, what: str, fix: str) -> None:
        super().__init__(f"{where}: {what}; {fix}")
        self.where, self.what, self.fix = where, what, fix


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    arch: str            # "llama" or "gpt2"
    dim: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


@dataclasses.dataclass
class Sample:
    label: str           # "wq forward", "rmsnorm_eager pow", ...
    op: str              # calibrate's op: matmul, attention, attention_backward, vector, norm, norm_backward
    dtype: str
    flops: float
    bytes: float
    m: int = 0
    k: int = 0
    n: int = 0
    seq: int = 0
    head_dim: int = 0
    chain: str = ""      # the eager chain this kernel belongs to ("" for GEMMs and attention)
    time_s: float | None = None
    out_dtype: str = ""  # an elementwise kernel's written dtype where it is not `dtype` (a cast)


@dataclasses.dataclass
class CollectiveRow:
    collective: str      # all_gather, reduce_scatter
    nodes: int
    gpus_per_node: int
    bytes: int           # NCCL's size: the whole buffer
    time_us: float


def _positive(where: str, value, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(where, f"is {json.dumps(value)}, not a positive integer", f"give e.g. {example}")
    return value


def model_from_dict(d: dict, where: str) -> Model:
    """A model from a scenario's inline "model" object or one entry of `fullshard models --json`
    (keys dim, n_heads|heads, n_kv_heads|kv_heads, ffn_dim, vocab_size|vocab). Errors name
    `where`.key, or the command-line flag (--n-kv-heads) when `where` is "--"."""
    name = str(d.get("name", "model"))
    arch = d.get("arch") or ("gpt2" if "gpt2" in name else "llama")

    def at(key: str) -> str:
        return "--" + key.replace("_", "-") if where == "--" else f"{where}.{key}"
    if arch not in ("llama", "gpt2"):
        raise PlanError(at("arch"), f"is {json.dumps(arch)}", 'use "llama" or "gpt2"')

    def get(*keys: str, default=None):
        for k in keys:
            if k in d:
                return d[k]
        if default is not None:
            return default
        raise PlanError(at(keys[0]), "is missing", f"give the model's {keys[0]}")

    dim = _positive(at("dim"), get("dim"), "4096")
    heads = _positive(at("n_heads"), get("n_heads", "heads"), "32")
    kv = _positive(at("n_kv_heads"), get("n_kv_heads", "kv_heads", default=heads), "8")
    ffn = _positive(at("ffn_dim"), get("ffn_dim", default=4 * dim), "14336")
    vocab = _positive(at("vocab_size"), get("vocab_size", "vocab", default=50257), "128256")
    if dim % heads:
        raise PlanError(at("dim"), f"is {dim}, not a multiple of n_heads {heads}", "give dim = n_heads x head_dim")
    if heads % kv:
        raise PlanError(at("n_kv_heads"), f"is {kv}, which does not divide n_heads {heads}", "give a divisor of n_heads")
    return Model(name, arch, dim, heads, kv, ffn, vocab)


def linears(m: Model) -> list[tuple[str, int, int]]:
    """(name, in_features, out_features) of one block's linears and the output head, as
    core/model/transformer.cc builds them."""
    hd = m.head_dim
    if m.arch == "gpt2":
        out = [("c_attn", m.dim, 3 * m.dim), ("attn.c_proj", m.dim, m.dim), ("c_fc", m.dim, 4 * m.dim),
               ("mlp.c_proj", 4 * m.dim, m.dim)]
    else:
        out = [("wq", m.dim, m.n_heads * hd), ("wk", m.dim, m.n_kv_heads * hd), ("wv", m.dim, m.n_kv_heads * hd),
               ("wo", m.n_heads * hd, m.dim), ("w1", m.dim, m.ffn_dim), ("w3", m.dim, m.ffn_dim),
               ("w2", m.ffn_dim, m.dim)]
    return out + [("output", m.dim, m.vocab_size)]


def gemm_samples(m: Model, tokens: int, dtype: str) -> list[Sample]:
    """Forward y[T,out] = x[T,in] W^T; grad-input dx[T,in] = dy[T,out] W; grad-weight
    dW[out,in] = dy^T x. {M, K, N} as fullshard's kernels carry them (NOTE [Kernel shapes]);
    shapes that repeat (wk and wv, w1 and w3) are timed once."""
    e = DTYPE_BYTES[dtype]
    seen, out = set(), []
    for name, fin, fout in linears(m):
        for layout, (mm, kk, nn) in (("forward", (tokens, fin, fout)), ("grad_input", (tokens, fout, fin)),
                                     ("grad_weight", (fout, tokens, fin))):
            if (layout, mm, kk, nn) in seen:
                continue
            seen.add((layout, mm, kk, nn))
            out.append(Sample(f"{name} {layout}", "matmul", dtype, 2.0 * mm * kk * nn,
                              float(e * (mm * kk + kk * nn + mm * nn)), m=mm, k=kk, n=nn))
    return out


def attention_samples(m: Model, batch: int, seq: int, dtype: str) -> list[Sample]:
    """Causal SDPA (flash) forward and backward; FLOPs as core/model/ops.cc attn_flops."""
    e, hd, h = DTYPE_BYTES[dtype], m.head_dim, m.n_heads
    fwd = 2.0 * batch * h * seq * seq * hd
    qkvo = float(e * batch * seq * hd * (2 * h + 2 * m.n_kv_heads))
    return [Sample("sdpa forward", "attention", dtype, fwd, qkvo, seq=seq, head_dim=hd),
            Sample("sdpa backward", "attention_backward", dtype, 2.5 * fwd, 2 * qkvo, seq=seq, head_dim=hd)]


def _ew(label: str, chain: str, dtype: str, numel: int, flops_per: float, read: Iterable[int], write: Iterable[int],
        out_dtype: str = "") -> Sample:
    """One elementwise/reduction kernel over `numel` elements: `read` / `write` list the bytes
    per element of each tensor read / written; `out_dtype` the dtype it writes when that is not
    `dtype` (calibrate prices converting kernels apart: NOTE [Converting kernels] in
    simulator/cost/dtype_conversion.h)."""
    return Sample(label, "vector", dtype, flops_per * numel, float(numel * (sum(read) + sum(write))), chain=chain,
                  out_dtype=out_dtype if out_dtype != dtype else "")


def eager_samples(m: Model, tokens: int, dtype: str) -> list[Sample]:
    """The eager kernels of one block and the loss, one kernel each (what each torch call
    launches on CUDA): torchtitan's RMSNorm._norm (x.float(), pow(2), mean(-1), + eps, rsqrt,
    x * r, type_as, * weight), the fused RMSNorm (F.rms_norm), SwiGLU's silu(w1 x) * w3 x, the
    residual add, a cast to fp32 (bf16 / fp16 models), the loss's log_softmax over fp32 logits, and a
    device-to-device copy of one activation."""
    e = DTYPE_BYTES[dtype]
    n, d, f, v = tokens * m.dim, m.dim, m.ffn_dim, m.vocab_size
    rows = tokens
    s = [
        _ew("rmsnorm_eager float", "rmsnorm_eager", dtype, n, 0, [e], [4], "fp32"),
        _ew("rmsnorm_eager pow", "rmsnorm_eager", "fp32", n, 1, [4], [4]),
        _ew("rmsnorm_eager mean", "rmsnorm_eager", "fp32", n, 1, [4], [4 / d]),
        _ew("rmsnorm_eager add_eps", "rmsnorm_eager", "fp32", rows, 1, [4], [4]),
        _ew("rmsnorm_eager rsqrt", "rmsnorm_eager", "fp32", rows, 1, [4], [4]),
        _ew("rmsnorm_eager mul", "rmsnorm_eager", "fp32", n, 1, [4, 4 / d], [4]),
        _ew("rmsnorm_eager type_as", "rmsnorm_eager", "fp32", n, 0, [4], [e], dtype),
        _ew("rmsnorm_eager mul_weight", "rmsnorm_eager", dtype, n, 1, [e, e / rows], [e]),
        # The fused norm as fullshard records it (core/model/ops.cc rms_norm): forward reads x
        # and the weight, writes y and the fp32 rstd; backward reads dy, x, rstd and the weight,
        # writes dx and the weight's gradient. Calibrate fits norm_memory_efficiency on them.
        Sample("rmsnorm_fused", "norm", dtype, 4.0 * n, float(n * e + d * e + n * e + rows * 4), chain="rmsnorm_fused"),
        Sample("rmsnorm_fused backward", "norm_backward", dtype, 8.0 * n,
               float(n * e + n * e + rows * 4 + d * e + n * e + d * e), chain="rmsnorm_fused"),
        _ew("residual add", "add", dtype, n, 1, [e, e], [e]),
        _ew("cast to fp32", "cast", dtype, n, 0, [e], [4], "fp32"),
        _ew("d2d copy", "copy", dtype, n, 0, [e], [e]),
        _ew("log_softmax fp32 logits", "cross_entropy", "fp32", tokens * v, 4, [4], [4]),
    ]
    if dtype == "fp32":  # x.float() and type_as are no-ops on fp32 tensors: no kernel to time
        s = [x for x in s if x.label not in ("rmsnorm_eager float", "rmsnorm_eager type_as", "cast to fp32")]
    at = next(i for i, x in enumerate(s) if x.label == "residual add")
    if m.arch == "llama":
        s[at:at] = [_ew("swiglu silu", "swiglu", dtype, tokens * f, 4, [e], [e]),
                  _ew("swiglu mul", "swiglu", dtype, tokens * f, 1, [e, e], [e])]
    else:
        s[at:at] = [_ew("gelu", "gelu", dtype, tokens * 4 * d, 8, [e], [e])]
    return s


COPY_BYTES_MIN = 64 << 20


def direct_samples(m: Model, tokens: int, dtype: str) -> list[Sample]:
    """Figures read off directly (NOTE [Direct samples] in simulator/cost/calibrate.h): the
    device time per kernel of a chain of tiny dependent kernels, the host time of one eager op,
    and H2D / D2H copies of one activation (at least 64 MiB) from pinned and pageable memory."""
    nbytes = float(max(COPY_BYTES_MIN, tokens * m.dim * DTYPE_BYTES[dtype]))
    out = [Sample("kernel_gap", "kernel_gap", dtype, 0, 0), Sample("eager_op", "eager_op", dtype, 0, 0)]
    for kind in ("pinned", "pageable"):
        for way in ("h2d", "d2h"):
            out.append(Sample(f"copy_{kind} {way}", f"copy_{kind}", dtype, 0, nbytes))
    return out


def build_plan(m: Model, batch: int, seq: int, dtype: str) -> list[Sample]:
    tokens = batch * seq
    return (gemm_samples(m, tokens, dtype) + attention_samples(m, batch, seq, dtype) + eager_samples(m, tokens, dtype) +
            direct_samples(m, tokens, dtype))


def _cell(v) -> str:
    if v is None or v == 0 or v == "":
        return ""
    if isinstance(v, float):
        return f"{v:.10g}"
    return str(v)


def write_csv(out, header: list[str], samples: list[Sample], collectives: list[CollectiveRow], notes: list[str]) -> None:
    """Writes calibrate's CSV to the text stream `out`: `header` and `notes` as `#` lines, then
    the column row, one row per collective, one per timed sample (untimed samples are skipped)."""
    for line in header:
        out.write(f"# {line}\n")
    out.write(",".join(CSV_COLUMNS) + "\n")
    for c in collectives:
        out.write(",".join([c.collective, str(c.nodes), str(c.gpus_per_node), str(c.bytes), f"{c.time_us:.6g}"] +
                           [""] * (len(CSV_COLUMNS) - 5)) + "\n")
    for s in samples:
        if s.time_s is None:
            continue
        out.write(f"# {s.label}\n")
        cells = {"op": s.op, "dtype": s.dtype, "flops": s.flops, "bytes": s.bytes, "time_s": s.time_s, "m": s.m,
                 "k": s.k, "n": s.n, "seq": s.seq, "head_dim": s.head_dim, "out_dtype": s.out_dtype}
        out.write(",".join(_cell(cells.get(c)) for c in CSV_COLUMNS) + "\n")
    for line in notes:
        out.write(f"# {line}\n")


def format_plan(samples: list[Sample]) -> str:
    """The plan as a table (measure.py --list)."""
    lines = [f"{'sample':<28} {'op':<18} {'dtype':<5} {'GFLOP':>10} {'MB':>10}  shape"]
    for s in samples:
        shape = (f"M={s.m} K={s.k} N={s.n}" if s.op == "matmul" else
                 f"seq={s.seq} head_dim={s.head_dim}" if s.op.startswith("attention") else s.chain or "direct")
        lines.append(f"{s.label:<28} {s.op:<18} {s.dtype:<5} {s.flops / 1e9:>10.3f} {s.bytes / 1e6:>10.3f}  {shape}")
    return "\n".join(lines)
