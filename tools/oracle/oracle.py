#!/usr/bin/env python3
"""PyTorch + Hugging Face transformers as the numerics oracle for fullshard (issue 12, item 4).

Builds tiny LlamaForCausalLM / GPT2LMHeadModel models with fixed random weights, trains them
3 steps the way a fullshard scenario does (the same batches, loss, gradient clipping and
torch.optim.AdamW), and writes what tests/unit/cpu_oracle_test.cc compares against:

  tests/data/oracle/corpus.txt                  the text both sides sample batches from
  tests/data/oracle/<case>/config.json          Hugging Face config (save_pretrained)
  tests/data/oracle/<case>/model.safetensors    the initial weights, Hugging Face names
  tests/data/oracle/<case>/scenario.json        the fullshard scenario of the same run
  tests/data/oracle/<case>/reference.safetensors
      tokens, labels   int64 [steps, batch, seq]  (fullshard's sampler, reproduced below)
      loss, grad_norm  f32 [steps]                 loss before step s, total norm before clipping
      logits           f32 [seq, vocab]            model(tokens) of the first sequence of the first
                                                   step, initial weights (bf16 cases: the bf16
                                                   logits, widened); one sequence keeps it small
      grad/<name>      f32                         gradient of the first step (before clipping)
      param/<name>     f32                         parameters after `steps` AdamW steps (fp32 cases)
    with __metadata__ naming the torch / transformers / safetensors versions and settings.

Run by hand where torch is installed (CI has no torch; the C++ test needs only these files):
  python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers safetensors
  /tmp/venv/bin/python tools/oracle/oracle.py tests/data/oracle
"""
import json
import os
import sys

import safetensors
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file

# The run every case shares (written into scenario.json; fullshard's defaults otherwise).
# eps 1e-6, not 1e-8: AdamW divides by sqrt(v) + eps, so with a tiny eps a gradient element
# far below its tensor's scale moves its parameter by a full lr step with the relative error
# of that element; with 1e-8 PyTorch's own fp32 and fp64 runs of the GPT-2 case differ by
# 3e-4 of an update's norm after 3 steps, with 1e-6 by 5e-6 (NOTE [Oracle tolerances]).
SEED = 3            # training.seed: the data sampler's seed (weights come from WEIGHT_SEED)
WEIGHT_SEED = 1234
BATCH = 12          # global sequences per step: 1, 2, 3 or 4 ranks take 12 / W each
SEQ = 16
STEPS = 3
VOCAB = 128         # the corpus is ASCII, so byte tokens stay below 128
OPT = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-6, "weight_decay": 0.1, "max_grad_norm": 0.5}

CORPUS = (
    "It was a bright cold day in April, and the clocks were striking thirteen. "
    "Quick zephyrs blow, vexing daft Jim; the five boxing wizards jump quickly. "
    "Sphinx of black quartz, judge my vow! 0123456789 + - * / = ( ) [ ] { } < > ; "
    "In the beginning the Universe was created. This has made a lot of people very angry. "
)

MASK64 = (1 << 64) - 1


def splitmix64(x):
    """core/common/splitmix.h"""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def fill_batch(text, seed, step, first_sample, batch, seq):
    """TextCorpus::fill_batch (core/data/text_corpus.cc): the window of global sample g of step s."""
    data = text.encode("ascii")
    windows = len(data) - seq
    toks, labs = [], []
    for i in range(batch):
        g = first_sample + i
        h = splitmix64(splitmix64(splitmix64(seed ^ 0xDA7A) ^ step) ^ g)
        start = h % windows
        toks.append(list(data[start:start + seq]))
        labs.append(list(data[start + 1:start + seq + 1]))
    return torch.tensor(toks, dtype=torch.int64), torch.tensor(labs, dtype=torch.int64)


def init_weights(model):
    """Random weights from WEIGHT_SEED: matrices N(0, 0.2) (about 1 / sqrt(dim), so that
    activations are of order 1 and GELU's tanh approximation, softmax and the RoPE angles are
    exercised where they differ from their alternatives, not in their linear region); norm
    weights 1 + N(0, 0.1) and biases N(0, 0.1), so that neither is the trivial 1 / 0."""
    g = torch.Generator().manual_seed(WEIGHT_SEED)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if p.dim() >= 2:
                p.copy_(0.2 * r)
            elif name.endswith("bias"):
                p.copy_(0.1 * r)
            else:
                p.copy_(1.0 + 0.1 * r)


def make_llama(rope_scaling=None):
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, hidden_act="silu", rope_scaling=rope_scaling)
    cfg._attn_implementation = "eager"
    return transformers.LlamaForCausalLM(cfg)


def make_gpt2():
    cfg = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=4, n_inner=None,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=1e-5, tie_word_embeddings=True)
    cfg._attn_implementation = "eager"
    return transformers.GPT2LMHeadModel(cfg)


def loss_of(model, tokens, labels):
    # torchtitan's loss: cross-entropy of the fp32 logits against the shifted-by-one labels,
    # mean over every token of the batch (HF's labels= would shift a second time). A MoE model
    # with output_router_logits adds router_aux_loss_coef * aux_loss, as its forward does.
    out = model(input_ids=tokens)
    logits = out.logits
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
    if getattr(out, "aux_loss", None) is not None:
        loss = loss + model.config.router_aux_loss_coef * out.aux_loss
    return loss, logits


def train(model, batches, compute_dtype, pre_step=None):
    """STEPS steps of fullshard's TrainingProgram::run_step on one rank: forward and backward
    (with FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) when compute_dtype
    is bf16: a bf16 copy of the fp32 parameters computes, its gradients are cast to fp32),
    clip_grad_norm_, AdamW (for-loop implementation, as torch picks on CPU), zero_grad.
    pre_step(): called after clipping, before each optimizer step (an optimizer step pre-hook)."""
    params = dict(model.named_parameters())
    opt = torch.optim.AdamW(params.values(), lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]),
                            eps=OPT["eps"], weight_decay=OPT["weight_decay"], foreach=False)
    compute = model
    if compute_dtype != torch.float32:
        import copy
        compute = copy.deepcopy(model).to(compute_dtype)
    losses, norms, first_grads, first_logits = [], [], None, None
    for step, (tokens, labels) in enumerate(batches):
        if compute is not model:
            with torch.no_grad():
                for n, p in compute.named_parameters():
                    p.copy_(params[n].to(compute_dtype))
                    p.grad = None
        loss, logits = loss_of(compute, tokens, labels)
        if first_logits is None:  # the first sequence of the first step, initial weights
            first_logits = logits[0].detach().float().clone()
        loss.backward()
        if compute is not model:
            for n, p in compute.named_parameters():
                params[n].grad = p.grad.float()
        if first_grads is None:
            first_grads = {n: p.grad.detach().clone() for n, p in params.items()}
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(params.values()), OPT["max_grad_norm"])))
        if pre_step is not None:
            pre_step()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, norms, first_grads, first_logits


def write_case(out_dir, name, model, scenario_extra, compute_dtype=torch.float32, weights_from=None,
               final_params=True):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    init_weights(model)
    if weights_from is None:
        model.save_pretrained(d, safe_serialization=True)
        gen = os.path.join(d, "generation_config.json")
        if os.path.exists(gen):
            os.remove(gen)
        weights = "model.safetensors"
    else:  # same architecture and weights as another case: keep one copy of the weights
        model.config.save_pretrained(d)
        weights = os.path.join("..", weights_from, "model.safetensors")
    batches = [fill_batch(CORPUS, SEED, s, 0, BATCH, SEQ) for s in range(STEPS)]
    losses, norms, grads, logits = train(model, batches, compute_dtype)
    ref = run_record(batches, losses, norms, logits)
    tied = getattr(model.config, "tie_word_embeddings", False)
    for n, p in model.named_parameters():
        if tied and n == "lm_head.weight":
            continue
        ref["grad/" + n] = grads[n].float().contiguous()
        if final_params:  # the variants store gradients only, to keep the files small
            ref["param/" + n] = p.detach().float().contiguous()
    save_file(ref, os.path.join(d, "reference.safetensors"),
              metadata=reference_metadata(compute_dtype, "tools/oracle/oracle.py"))
    write_scenario(d, name, weights, scenario_extra, "tools/oracle/oracle.py")
    print(f"{name}: loss {['%.6f' % l for l in losses]} grad_norm {['%.4f' % n for n in norms]}")


def run_record(batches, losses, norms, logits):
    """reference.safetensors' tensors of the run itself: batches, losses, norms, first logits."""
    return {
        "tokens": torch.stack([b[0] for b in batches]).contiguous(),
        "labels": torch.stack([b[1] for b in batches]).contiguous(),
        "loss": torch.tensor(losses, dtype=torch.float32),
        "grad_norm": torch.tensor(norms, dtype=torch.float32),
        "logits": logits.contiguous(),
    }


def reference_metadata(compute_dtype, script):
    """reference.safetensors' __metadata__: the versions and settings that produced it."""
    return {
        "torch": torch.__version__, "transformers": transformers.__version__,
        "safetensors": safetensors.__version__, "python": sys.version.split()[0],
        "compute_dtype": str(compute_dtype).replace("torch.", ""), "steps": str(STEPS),
        "batch": str(BATCH), "seq_len": str(SEQ), "seed": str(SEED), "weight_seed": str(WEIGHT_SEED),
        "optimizer": json.dumps(OPT), "script": script,
    }


def write_scenario(d, name, weights, scenario_extra, script):
    """<d>/scenario.json: the fullshard scenario of the case's run, `scenario_extra` merged in."""
    scenario = {
        "name": "oracle-" + name,
        "description": f"PyTorch oracle case ({script}): the run reference.safetensors records; "
                       "train it with the corpus ../corpus.txt.",
        "model": {"hf_config": "config.json", "weights": weights},
        "training": {"batch_per_rank": BATCH, "seq_len": SEQ, "steps": STEPS, "seed": SEED,
                     "optimizer": {k: OPT[k] for k in OPT}},
        "fsdp": {"mesh": {"shape": [1]}},
        "hardware": {"profile": "cpu", "nodes": 1, "gpus_per_node": 1},
    }
    for k, v in scenario_extra.items():
        scenario[k].update(v)
    with open(os.path.join(d, "scenario.json"), "w") as f:
        json.dump(scenario, f, indent=2)
        f.write("\n")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/oracle"
    os.makedirs(out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    with open(os.path.join(out_dir, "corpus.txt"), "w") as f:
        f.write(CORPUS)
    bf16 = {"fsdp": {"mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "fp32"}}}
    write_case(out_dir, "llama", make_llama(), {})
    write_case(out_dir, "gpt2", make_gpt2(), {})
    llama31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}
    write_case(out_dir, "llama-rope-scaling", make_llama(llama31), {}, weights_from="llama", final_params=False)
    write_case(out_dir, "llama-bf16", make_llama(), bf16, torch.bfloat16, weights_from="llama", final_params=False)
    write_case(out_dir, "gpt2-bf16", make_gpt2(), bf16, torch.bfloat16, weights_from="gpt2", final_params=False)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")


if __name__ == "__main__":
    main()
