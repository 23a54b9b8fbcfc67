#!/usr/bin/env python3
"""torchao's float8 casts and emulated scaled matmuls as the reference for the CPU kernels
(backends/cpu/kernels/float8.cc, issue 32 item 4).

Runs torchao's own functions (torchao.float8, 0.18 when the file was written, on torch 2.11's
CPU) and writes tests/data/oracle/float8_kernels.json:

- "casts": hp_tensor_to_float8_dynamic of x viewed as [rows, cols] for each (x dtype, target
  format, granularity and axis, round_scales_to_power_of_2): the inputs' bits, tensor_to_amax's
  amax (x's dtype), the fp32 scale and the float8 codes. Inputs mix magnitudes from 2^-20 to 2^10,
  zeros and a row or column of zeros (amax 0: the 1e-12 clamp).
- "scales": amax_to_scale of 4,096 fp32 amaxes (random bit patterns of finite positive floats,
  with 0, subnormals, values under the 1e-12 clamp, 448, 57344, the largest float and +inf) for
  each target format and round_scales_to_power_of_2, as fp32 bits.
- "matmuls": the emulated torch.mm(a.float() / a_scale, b.float() / b_scale).to(out dtype) of
  torchao's float8 mm (Float8MMConfig emulate) for each kind's layout, with its float8 codes and
  fp32 scales. The products are exact in fp32 whatever the summation order (codes of magnitude
  2^-3..2^3, K <= 32, power-of-two scales; checked here against float64), so the reference
  holds for any BLAS.

  python3 tools/oracle/float8_kernels.py tests/data/oracle/float8_kernels.json
"""
import json
import sys

import torch
import torchao
from torchao.float8.config import ScalingGranularity
from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
from torchao.float8.float8_training_tensor import LinearMMConfig
from torchao.float8.float8_utils import amax_to_scale, tensor_to_amax

FORMATS = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def bits(t):
    if t.dtype == torch.float32:
        return t.contiguous().view(torch.int32).flatten().tolist()
    if t.dtype == torch.bfloat16:
        return (t.contiguous().view(torch.int16).flatten().to(torch.int32) & 0xFFFF).tolist()
    return (t.contiguous().view(torch.uint8).flatten().to(torch.int32)).tolist()


def sample(g, rows, cols, dtype, zero_line):
    mag = torch.exp2(torch.randint(-20, 11, (rows, cols), generator=g).float())
    x = torch.randn(rows, cols, generator=g) * mag
    x[torch.rand(rows, cols, generator=g) < 0.05] = 0.0
    if zero_line == "row":
        x[1, :] = 0.0
    elif zero_line == "col":
        x[:, 2] = 0.0
    return x.to(dtype)


def casts(g):
    out = []
    shapes = [(1, 37), (8, 16), (13, 24), (32, 9)]
    for dname, dt in DTYPES.items():
        for fname, f8 in FORMATS.items():
            for gran, axis in (("tensorwise", None), ("axiswise", -1), ("axiswise", 0)):
                for pow2 in (False, True):
                    for rows, cols in shapes:
                        zero = "row" if axis == -1 and rows > 1 else ("col" if axis == 0 else None)
                        x = sample(g, rows, cols, dt, zero)
                        sg = (ScalingGranularity.TENSORWISE if gran == "tensorwise"
                              else ScalingGranularity.AXISWISE)
                        amax = tensor_to_amax(x, False, None, sg, axis)
                        t = hp_tensor_to_float8_dynamic(
                            x, f8, LinearMMConfig(), scaling_granularity=sg, axiswise_dim=axis,
                            round_scales_to_power_of_2=pow2)
                        out.append({"dtype": dname, "target": fname, "granularity": gran,
                                    "axis": -1 if axis is None else axis, "pow2": pow2,
                                    "rows": rows, "cols": cols, "x": bits(x),
                                    "amax": bits(amax), "scale": bits(t._scale.float()),
                                    "codes": bits(t._data)})
    return out


def scales(g):
    edge = torch.tensor([0.0, 1e-45, 1e-40, 1e-13, 1e-12, 1.5e-12, 1.0, 448.0, 57344.0, 3.0e38,
                         float("inf")])
    rand = torch.randint(0, 0x7F800000, (4096 - len(edge),), generator=g, dtype=torch.int32)
    amax = torch.cat([edge, rand.view(torch.float32)])
    out = []
    for fname, f8 in FORMATS.items():
        for pow2 in (False, True):
            out.append({"target": fname, "pow2": pow2, "amax": bits(amax),
                        "scale": bits(amax_to_scale(amax, f8, pow2))})
    return out


def codes(g, rows, cols, f8):
    v = torch.randn(rows, cols, generator=g).abs().clamp(0.125, 7.9)
    v = v * torch.where(torch.rand(rows, cols, generator=g) < 0.5, -1.0, 1.0)
    return v.to(f8)


def pow2_scale(g, n):
    return torch.exp2(torch.randint(-4, 5, (n,), generator=g).float())


def matmuls(g):
    out = []
    for kind in ("forward", "backward_input", "backward_weight"):
        for out_name, out_dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            for gran in ("tensorwise", "axiswise"):
                M, K, N = 7, 24, 5
                # (a [rows, cols], b [rows, cols], a scale along rows?, b scale along rows?)
                if kind == "forward":
                    a_shape, b_shape, a_row, b_row = (M, K), (N, K), True, True
                elif kind == "backward_input":
                    a_shape, b_shape, a_row, b_row = (M, N), (N, K), True, False
                else:
                    a_shape, b_shape, a_row, b_row = (M, N), (M, K), False, False
                fa = torch.float8_e5m2 if kind != "forward" else torch.float8_e4m3fn
                a = codes(g, *a_shape, fa)
                b = codes(g, *b_shape, torch.float8_e4m3fn)
                if gran == "tensorwise":
                    sa, sb = pow2_scale(g, 1), pow2_scale(g, 1)
                    sa_b, sb_b = sa.reshape(1, 1), sb.reshape(1, 1)
                else:
                    sa = pow2_scale(g, a_shape[0] if a_row else a_shape[1])
                    sb = pow2_scale(g, b_shape[0] if b_row else b_shape[1])
                    sa_b = sa.reshape(-1, 1) if a_row else sa.reshape(1, -1)
                    sb_b = sb.reshape(-1, 1) if b_row else sb.reshape(1, -1)
                da, db = a.float() / sa_b, b.float() / sb_b
                # torchao's emulated float8 mm (float8_ops.py, Float8MMConfig.emulate)
                if kind == "forward":
                    lhs, rhs = da, db.t()
                elif kind == "backward_input":
                    lhs, rhs = da, db
                else:
                    lhs, rhs = da.t(), db
                y32 = torch.mm(lhs, rhs)
                assert torch.equal(y32, torch.mm(lhs.double(), rhs.double()).float()), kind
                y = y32.to(out_dt)
                out.append({"kind": kind, "out": out_name, "granularity": gran,
                            "m": M, "k": K, "n": N,
                            "a_format": "e5m2" if fa == torch.float8_e5m2 else "e4m3fn",
                            "a": bits(a), "b": bits(b), "a_scale": bits(sa), "b_scale": bits(sb),
                            "y": bits(y)})
    return out


def main(path):
    g = torch.Generator().manual_seed(20261128)
    doc = {"torch": torch.__version__, "torchao": torchao.__version__,
           "functions": "torchao/float8/float8_scaling_utils.py hp_tensor_to_float8_dynamic, "
                        "float8_utils.py tensor_to_amax; float8_ops.py emulated mm",
           "casts": casts(g), "scales": scales(g), "matmuls": matmuls(g)}
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
