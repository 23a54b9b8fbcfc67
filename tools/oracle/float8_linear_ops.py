#!/usr/bin/env python3
"""The aten ops torchao's Float8Linear dispatches, per recipe (issue 32; docs/float8.md).

Prints, for one bf16 nn.Linear(64, 32) converted by torchao.float8.convert_to_float8_training with
each recipe (tensorwise, rowwise, rowwise_with_gw_hp), every aten op of its forward and backward
with the shapes and dtypes of its tensor inputs and outputs, as a TorchDispatchMode sees them.
core/model/float8_linear.cc (NOTE [Float8 casts]) records the same sequence: abs, max / amax,
the scale's small kernels, .to(fp32), mul, clamp, .to(float8), then the products. emulate=True
runs on CPU (the products show as aten.mm of the dequantised operands there; on a GPU they are
torch._scaled_mm). Not a test input: read by hand when torchao changes.
Run with torch 2.11 and torchao 0.18 (pip install torch==2.11.0 torchao):
  python3 tools/oracle/float8_linear_ops.py [tensorwise|rowwise|rowwise_with_gw_hp]
"""
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torchao.float8 import Float8LinearConfig, convert_to_float8_training


def describe(t):
    return f"{tuple(t.shape)}:{str(t.dtype).replace('torch.', '')}"


class Log(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else [out]
        ins = [describe(a) for a in args if isinstance(a, torch.Tensor)]
        print(f"  {func}  in={ins} out={[describe(o) for o in outs if isinstance(o, torch.Tensor)]}")
        return out


def main(recipes):
    for recipe in recipes:
        base = Float8LinearConfig.from_recipe_name(recipe)
        fields = {f: getattr(base, f) for f in base.__dataclass_fields__}
        config = Float8LinearConfig(**{**fields, "emulate": True})
        model = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False)).to(torch.bfloat16)
        convert_to_float8_training(model, config=config)
        x = torch.randn(16, 64, dtype=torch.bfloat16, requires_grad=True)
        print(f"{recipe}:")
        with Log():
            print(" forward")
            y = model(x)
            print(" backward")
            y.sum().backward()


if __name__ == "__main__":
    main(sys.argv[1:] or ["tensorwise", "rowwise", "rowwise_with_gw_hp"])
