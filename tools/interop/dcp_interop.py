#!/usr/bin/env python3
"""fullshard's weights and PyTorch's torch.distributed.checkpoint (DCP), both directions.

PyTorch FSDP2 reads and writes Hugging Face safetensors through DCP's own storage layer
(torch.distributed.checkpoint.HuggingFaceStorageReader / HuggingFaceStorageWriter, PyTorch 2.11;
torchtitan's `checkpoint.last_save_in_hf` uses the writer the same way). fullshard writes that
format with `fullshard checkpoint export --safetensors` and reads it with `--init-from`
(docs/checkpoints.md), so neither side needs custom code. This script is the PyTorch side, run
by tests/cli/dcp_interop.sh where torch is installed:

  load DIR --world W      a PyTorch FSDP2 Llama with Hugging Face parameter names, sharded over W
                          Gloo ranks on the CPU, loads DIR with dcp.load + HuggingFaceStorageReader
                          into its sharded DTensors; every parameter's full tensor must equal the
                          file's bit for bit.
  save DIR --world W      the same model, randomly initialised (--seed), saved by its W ranks with
                          dcp.save + HuggingFaceStorageWriter(save_distributed=True,
                          enable_consolidation=True): each rank writes its shards, then DCP
                          consolidates them into DIR's Hugging Face files and index (--files N).
  compare A B             the safetensors tensors under A and B (files or folders) are equal:
                          same names, dtypes, shapes and bytes.

With --format dcp, load and save use DCP's own format instead (FileSystemReader / FileSystemWriter:
a .metadata file and __<rank>_0.distcp files, what `fullshard checkpoint export --dcp` writes and
`--init-from` reads): load compares the loaded parameters with the safetensors --reference, and
save also writes the saved parameters, gathered, to the safetensors --reference.

With --optim (--format dcp only) the optimizer crosses too (docs/checkpoints.md, "Optimizer
state"): load also builds a torch.optim.AdamW with deliberately wrong hyperparameters, loads
get_optimizer_state_dict's keys (--flat: flatten_optimizer_state_dict=True, torchtitan's layout)
with the model's and set_optimizer_state_dict; the hyperparameters and the step must be the
checkpoint's (--lr ..., --expect-step). save runs --steps AdamW steps on seeded random gradients
before dcp.save of model + optimizer. Both then take one more step with zero gradients and write
the gathered parameters to --after (a step's update from the optimizer state alone).
compare --atol A allows |a - b| <= A per element (and --ulps U at most U fp32 ulps of
max(|a|, |b|, --ulp-floor)) and prints the largest difference.

The model's sizes come from --dim, --layers, --heads, --kv-heads, --ffn, --vocab (a Llama decoder
with untied embeddings: fullshard's tiny-llama by default).
"""
import argparse
import glob
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import distribute_tensor
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        hd = a.dim // a.heads
        self.q_proj = nn.Linear(a.dim, a.heads * hd, bias=False)
        self.k_proj = nn.Linear(a.dim, a.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(a.dim, a.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(a.heads * hd, a.dim, bias=False)


class Mlp(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.gate_proj = nn.Linear(a.dim, a.ffn, bias=False)
        self.up_proj = nn.Linear(a.dim, a.ffn, bias=False)
        self.down_proj = nn.Linear(a.ffn, a.dim, bias=False)


class Layer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.self_attn = Attention(a)
        self.mlp = Mlp(a)
        self.input_layernorm = nn.RMSNorm(a.dim)
        self.post_attention_layernorm = nn.RMSNorm(a.dim)


class Decoder(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab, a.dim)
        self.layers = nn.ModuleList(Layer(a) for _ in range(a.layers))
        self.norm = nn.RMSNorm(a.dim)


class Llama(nn.Module):
    """Parameters only, named as Hugging Face's LlamaForCausalLM names them."""

    def __init__(self, a):
        super().__init__()
        self.model = Decoder(a)
        self.lm_head = nn.Linear(a.dim, a.vocab, bias=False)


def sharded_model(a, rank, world):
    torch.manual_seed(a.seed)  # the same initial values on every rank before sharding
    model = Llama(a)
    for name, p in model.named_parameters():  # norms too: ones would hide a mix-up
        with torch.no_grad():
            p.copy_(torch.randn(p.shape) * 0.05 + (1.0 if "norm" in name else 0.0))
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def safetensors_under(path):
    files = [path] if os.path.isfile(path) else sorted(glob.glob(os.path.join(path, "*.safetensors")))
    out = {}
    for f in files:
        for k, v in load_file(f).items():
            assert k not in out, f"{k} in two files"
            out[k] = v
    return out


def adamw(model, a, wrong=False):
    if a.sgd:  # another optimizer's state (momentum_buffer), which fullshard must refuse
        return torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    if wrong:  # values the checkpoint's param_groups must replace
        return torch.optim.AdamW(model.parameters(), lr=1.0, betas=(0.5, 0.5), eps=0.5, weight_decay=0.5)
    return torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                             weight_decay=a.weight_decay)


def optim_state_dict(model, opt, a):
    return get_optimizer_state_dict(model, opt, options=StateDictOptions(flatten_optimizer_state_dict=a.flat))


def set_grads(model, step, zero=False):
    """Seeded random gradients (or zeros), the same full tensor on every rank, sharded as the
    parameter is."""
    g = torch.Generator().manual_seed(1000 + step)
    for p in model.parameters():
        full = torch.zeros(p.shape) if zero else torch.randn(p.shape, generator=g) * 0.01
        p.grad = distribute_tensor(full, p.device_mesh, p.placements)


def step_and_write_after(model, opt, a, rank):
    set_grads(model, 0, zero=True)
    opt.step()
    full = {name: p.full_tensor() for name, p in model.named_parameters()}  # collectives
    if rank == 0:
        save_file(full, a.after)


def worker_optim(rank, world, a):
    model = sharded_model(a, rank, world)
    if a.cmd == "load":
        opt = adamw(model, a, wrong=True)
        msd, osd = get_model_state_dict(model), optim_state_dict(model, opt, a)
        sd = {**msd, **osd}
        dcp.load(sd, checkpoint_id=a.dir)
        # dcp.load stores a non-tensor value (a param group's lr, ...) into the dict it was given,
        # and tensors in place: with the flat layout the values are top-level keys of `sd`.
        osd = {k: sd[k] for k in osd}
        set_model_state_dict(model, msd)
        set_optimizer_state_dict(model, opt, osd, options=StateDictOptions(flatten_optimizer_state_dict=a.flat))
        for group in opt.param_groups:
            got = (group["lr"], tuple(group["betas"]), group["eps"], group["weight_decay"])
            want = (a.lr, (a.beta1, a.beta2), a.eps, a.weight_decay)
            assert got == want, f"param group {got} is not the checkpoint's {want}"
        steps = {float(opt.state[p]["step"]) for p in model.parameters()}
        assert steps == {float(a.expect_step)}, f"steps {steps}, expected {a.expect_step}"
        st = opt.state[next(model.parameters())]
        if rank == 0:
            print(f"dcp.load (dcp, optimizer{', flat' if a.flat else ''}): {len(osd if a.flat else osd['state'])} "
                  f"entries; step {float(st['step'])} ({st['step'].dtype}, {type(st['step']).__name__}), "
                  f"exp_avg {type(st['exp_avg']).__name__} {st['exp_avg'].placements}; lr {opt.param_groups[0]['lr']}")
        full = {name: p.full_tensor() for name, p in model.named_parameters()}
        if rank == 0:
            want = safetensors_under(a.reference)
            for name, t in full.items():
                assert torch.equal(t, want[name]), f"{name}: loaded values differ from the file"
        step_and_write_after(model, opt, a, rank)
    else:
        opt = adamw(model, a)
        for k in range(a.steps):
            set_grads(model, k + 1)
            opt.step()
        osd = optim_state_dict(model, opt, a)
        dcp.save({**get_model_state_dict(model), **osd}, checkpoint_id=a.dir)
        if rank == 0:
            st = opt.state[next(model.parameters())]
            print(f"dcp.save (dcp, optimizer): {a.steps} {type(opt).__name__} steps on FSDP2 over {world} "
                  f"ranks; state {sorted(st)}, step {st.get('step')!r}, foreach {opt.defaults['foreach']}")
        step_and_write_after(model, opt, a, rank)


def worker(rank, world, port, a):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        if a.optim:
            worker_optim(rank, world, a)
            return
        model = sharded_model(a, rank, world)
        sd = get_model_state_dict(model)  # sharded DTensors, Hugging Face FQNs
        if a.cmd == "load":
            if a.format == "dcp":
                dcp.load(sd, storage_reader=dcp.FileSystemReader(a.dir))
            else:
                dcp.load(sd, storage_reader=dcp.HuggingFaceStorageReader(a.dir))
            set_model_state_dict(model, sd)
            files = safetensors_under(a.reference or a.dir) if rank == 0 else None
            n = 0
            for name, p in model.named_parameters():
                full = p.full_tensor()  # a collective: every rank
                if rank == 0:
                    want = files[name]
                    assert full.dtype == want.dtype and full.shape == want.shape, (name, full.shape, want.shape)
                    assert torch.equal(full, want), f"{name}: loaded values differ from the file"
                    n += 1
            if rank == 0:
                assert n == len(files), f"the model has {n} parameters, the files {len(files)}"
                print(f"dcp.load ({a.format}): {n} tensors into FSDP2 over {world} ranks, equal to the files")
        elif a.format == "dcp":
            dcp.save(sd, storage_writer=dcp.FileSystemWriter(a.dir))
            full = {name: p.full_tensor() for name, p in model.named_parameters()}  # collectives
            if rank == 0:
                save_file(full, a.reference)
                print(f"dcp.save (dcp): {len(sd)} tensors from FSDP2 over {world} ranks")
        else:
            names = list(sd.keys())
            mapping = {k: 1 + i % a.files for i, k in enumerate(names)}
            dcp.save(sd, storage_writer=dcp.HuggingFaceStorageWriter(
                a.dir, fqn_to_index_mapping=mapping, save_distributed=True, enable_consolidation=True))
            if rank == 0:
                print(f"dcp.save: {len(names)} tensors from FSDP2 over {world} ranks into {a.files} files")
    finally:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cmd", choices=["load", "save", "compare"])
    p.add_argument("dir")
    p.add_argument("other", nargs="?")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--files", type=int, default=2)
    p.add_argument("--format", choices=["hf", "dcp"], default="hf")
    p.add_argument("--reference", help="with --format dcp: safetensors to compare with / to write")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--port", type=int, default=29517)
    p.add_argument("--optim", action="store_true", help="with --format dcp: AdamW's state too")
    p.add_argument("--flat", action="store_true", help="flatten_optimizer_state_dict=True")
    p.add_argument("--sgd", action="store_true", help="save: SGD with momentum instead of AdamW")
    p.add_argument("--after", help="with --optim: the parameters after one more (zero-gradient) step")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--expect-step", type=int, default=0)
    p.add_argument("--atol", type=float, default=0.0)
    p.add_argument("--ulps", type=float, default=0, help="compare: also at most this many fp32 ulps apart")
    p.add_argument("--ulp-floor", type=float, default=0.0, help="compare: ulps of max(|a|, |b|, this)")
    for k, v in dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1).items():
        p.add_argument("--" + k.replace("_", "-"), type=float, default=v)
    for k, v in dict(dim=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=256).items():
        p.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    a = p.parse_args()
    if a.optim and (a.format != "dcp" or not a.after):
        p.error("--optim needs --format dcp and --after")
    if a.format == "dcp" and a.cmd != "compare" and not a.reference and not (a.optim and a.cmd == "save"):
        p.error("--format dcp needs --reference")
    if a.cmd == "compare":
        x, y = safetensors_under(a.dir), safetensors_under(a.other)
        assert sorted(x) == sorted(y), (sorted(set(x) ^ set(y)))
        worst, ulps, unequal, n = 0.0, 0, 0, 0
        for k in x:
            assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, (k, x[k].shape, y[k].shape)
            d = (x[k].double() - y[k].double()).abs()
            worst, unequal, n = max(worst, float(d.max())), unequal + int((d > 0).sum()), n + d.numel()
            if x[k].dtype == torch.float32 and d.numel():
                # In units of the last place of max(|a|, |b|, --ulp-floor): a parameter that the
                # update nearly cancels keeps the update's rounding error, an ulp of the update.
                big = torch.maximum(torch.maximum(x[k].abs(), y[k].abs()), torch.tensor(a.ulp_floor))
                ulp = torch.nextafter(big, torch.tensor(float("inf"))) - big
                ulps = max(ulps, float((d / ulp.double()).max()))
            assert a.atol > 0 or torch.equal(x[k], y[k]), f"{k} differs"
            assert float(d.max()) <= a.atol, f"{k} differs by {float(d.max())} > {a.atol}"
            assert a.ulps == 0 or ulps <= a.ulps, f"{k} differs by {ulps} ulps > {a.ulps}"
        print(f"equal: {len(x)} tensors" if unequal == 0 else
              f"within {a.atol}: {len(x)} tensors, {unequal} of {n} elements differ, at most by {worst:.3g} "
              f"({ulps:.3g} ulps of max(|a|, |b|, {a.ulp_floor:g}))")
        return
    mp.spawn(worker, args=(a.world, a.port, a), nprocs=a.world, join=True)


if __name__ == "__main__":
    sys.exit(main())
