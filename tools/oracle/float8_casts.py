#!/usr/bin/env python3
"""PyTorch's float8 casts as the reference for fullshard's (issue 32, item 1).

Writes tests/data/oracle/float8_casts.bin: for a fixed list of float32 inputs, the codes torch
gives for x.to(torch.float8_e4m3fn) and x.to(torch.float8_e5m2) (torch's rule: round to nearest
even, out of range to NaN for e4m3fn and to inf for e5m2), and for the saturated casts torchao
uses (torch.clamp(x, -max, max) then .to(): out of range to +-max, NaN stays NaN).

Inputs, in this order (tests/unit/tensor_float8_test.cc rebuilds the first two groups itself and
checks the stored ones against them):
  1. every bfloat16 value whose exponent field is in [97, 150] (2^-30 .. 2^23), both signs, as
     float32: 2 x 54 x 128 = 13,824 values; then +-0, +-inf and NaN;
  2. for every pair of adjacent finite positive codes of each format: the float32 midpoint and
     its two float32 neighbours (ties and the values just off them), both signs;
  3. 8,192 float32 bit patterns from a fixed-seed generator (any exponent).
File layout: "FP8CAST1", uint32 count, then count records of little-endian
  uint32 input bits, uint8 e4m3fn, uint8 e5m2, uint8 e4m3fn saturated, uint8 e5m2 saturated;
  then the decoding: for e4m3fn, then e5m2, the float32 bits of codes 0..255 (.to(float32)).
Run by hand (CI has no torch; the test needs only the file):
  /tmp/venv/bin/python tools/oracle/float8_casts.py tests/data/oracle/float8_casts.bin
"""
import struct
import sys

import numpy as np
import torch


def inputs():
    bits = []
    for sign in (0, 1):
        for exp in range(97, 151):
            for mant in range(128):
                bits.append(((sign << 15) | (exp << 7) | mant) << 16)
    bits += [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000]
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        codes = torch.arange(0, 128, dtype=torch.uint8).view(dtype).to(torch.float32)
        finite = [v for v in codes.tolist() if np.isfinite(v)]
        for a, b in zip(finite, finite[1:]):
            mid = np.float32((a + b) / 2)  # exact: both have at most 4 significant bits
            for v in (mid, np.nextafter(mid, np.float32(0)), np.nextafter(mid, np.float32(np.inf))):
                u = int(np.float32(v).view(np.uint32))
                bits += [u, u | 0x80000000]
    rng = np.random.default_rng(20261128)
    bits += [int(x) for x in rng.integers(0, 2**32, size=8192, dtype=np.uint64)]
    return bits


def main(out):
    bits = inputs()
    x = torch.tensor(np.array(bits, dtype=np.uint32).view(np.float32))
    cols = []
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        cols.append(x.to(dtype).view(torch.uint8))
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        m = torch.finfo(dtype).max
        cols.append(torch.clamp(x, -m, m).to(dtype).view(torch.uint8))
    with open(out, "wb") as f:
        f.write(b"FP8CAST1" + struct.pack("<I", len(bits)))
        for i, u in enumerate(bits):
            f.write(struct.pack("<IBBBB", u, *(int(c[i]) for c in cols)))
        for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            decoded = torch.arange(256, dtype=torch.uint8).view(dtype).to(torch.float32)
            f.write(decoded.numpy().view(np.uint32).astype("<u4").tobytes())


if __name__ == "__main__":
    main(sys.argv[1])
