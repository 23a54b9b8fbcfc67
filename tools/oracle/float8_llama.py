#!/usr/bin/env python3
"""torchao's float8 training of the oracle's tiny Llama as the reference for fullshard's CPU
backend (issue 32 item 4; tests/unit/cpu_oracle_test.cc, LlamaFloat8).

The `llama` case of oracle.py (its weights, batches, loss, clipping and AdamW) with every
decoder linear converted by torchao's convert_to_float8_training (recipe "tensorwise",
Float8LinearConfig emulate=True: the CPU emulation, torchao 0.18), lm_head kept fp32 as
torchtitan's filter_fqns ["output"] keeps it. Writes tests/data/oracle/llama-float8/ as oracle.py
writes its variants (config.json, scenario.json with training.float8, reference.safetensors with
tokens, labels, loss, grad_norm, logits and the first step's gradients); the weights are
../llama/model.safetensors, loaded here.

  /tmp/tv/bin/python tools/oracle/float8_llama.py tests/data/oracle
"""
import dataclasses
import json
import os
import sys

import safetensors
import torch
import torchao
import transformers
from safetensors.torch import load_file, save_file
from torchao.float8 import Float8LinearConfig, convert_to_float8_training

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402  (the shared run: constants, batches, train)

RECIPE = "tensorwise"


def main(out_dir):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    model = oracle.make_llama()
    model.load_state_dict(load_file(os.path.join(out_dir, "llama", "model.safetensors")), strict=True)
    config = dataclasses.replace(Float8LinearConfig.from_recipe_name(RECIPE), emulate=True)
    converted = []

    def keep(m, fqn):  # torchtitan's filter: dims multiples of 16, not the output projection
        ok = fqn != "lm_head" and m.in_features % 16 == 0 and m.out_features % 16 == 0
        if ok:
            converted.append(fqn)
        return ok

    convert_to_float8_training(model, config=config, module_filter_fn=keep)
    assert len(converted) == 14, converted  # 2 layers x (q, k, v, o, gate, up, down)
    d = os.path.join(out_dir, "llama-float8")
    os.makedirs(d, exist_ok=True)
    model.config.save_pretrained(d)
    batches = [oracle.fill_batch(oracle.CORPUS, oracle.SEED, s, 0, oracle.BATCH, oracle.SEQ)
               for s in range(oracle.STEPS)]
    losses, norms, grads, logits = oracle.train(model, batches, torch.float32)
    ref = {
        "tokens": torch.stack([b[0] for b in batches]).contiguous(),
        "labels": torch.stack([b[1] for b in batches]).contiguous(),
        "loss": torch.tensor(losses, dtype=torch.float32),
        "grad_norm": torch.tensor(norms, dtype=torch.float32),
        "logits": logits.contiguous(),
    }
    for n, _ in model.named_parameters():
        ref["grad/" + n] = grads[n].float().contiguous()
    meta = {
        "torch": torch.__version__, "torchao": torchao.__version__,
        "transformers": transformers.__version__, "safetensors": safetensors.__version__,
        "python": sys.version.split()[0], "compute_dtype": "float32", "float8": RECIPE,
        "steps": str(oracle.STEPS), "batch": str(oracle.BATCH), "seq_len": str(oracle.SEQ),
        "seed": str(oracle.SEED), "optimizer": json.dumps(oracle.OPT),
        "script": "tools/oracle/float8_llama.py",
    }
    save_file(ref, os.path.join(d, "reference.safetensors"), metadata=meta)
    scenario = {
        "name": "oracle-llama-float8",
        "description": "PyTorch + torchao oracle case (tools/oracle/float8_llama.py): the llama case "
                       "with torchao's tensorwise float8 linears (emulated); train it with the "
                       "corpus ../corpus.txt.",
        "model": {"hf_config": "config.json", "weights": os.path.join("..", "llama", "model.safetensors")},
        "training": {"batch_per_rank": oracle.BATCH, "seq_len": oracle.SEQ, "steps": oracle.STEPS,
                     "seed": oracle.SEED, "optimizer": dict(oracle.OPT),
                     "float8": {"recipe": RECIPE, "filter_fqns": ["output"]}},
        "fsdp": {"mesh": {"shape": [1]}},
        "hardware": {"profile": "cpu", "nodes": 1, "gpus_per_node": 1},
    }
    with open(os.path.join(d, "scenario.json"), "w") as f:
        json.dump(scenario, f, indent=2)
        f.write("\n")
    print(f"llama-float8: loss {['%.6f' % l for l in losses]} grad_norm {['%.4f' % n for n in norms]}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/oracle")
