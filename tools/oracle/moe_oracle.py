#!/usr/bin/env python3
"""PyTorch + Hugging Face transformers as the numerics oracle for fullshard's mixture-of-experts
models (issue 30): tiny MixtralForCausalLM, Qwen3MoeForCausalLM and DeepseekV3ForCausalLM (multi-
head latent attention, a dense first layer, shared experts, sigmoid scores with the expert bias,
group-limited routing) trained 3 steps exactly as tools/oracle/oracle.py trains its cases, with
the same files (see oracle.py's docstring) under tests/data/oracle/<case>/, read by
tests/unit/cpu_oracle_test.cc. Tensors take the names the hub's files use (save_pretrained's:
one tensor per expert, NOTE [Hugging Face names of experts] in core/checkpoint/hf_names.h), which
transformers 5 fuses in memory (experts.gate_up_proj [E, 2F, D], experts.down_proj [E, D, F]).

DeepSeek-V3's aux-loss-free balancing is torchtitan's (NOTE [Expert bias] in
core/model/expert_bias.h), which Hugging Face's modules do not train: e_score_correction_bias
starts random (so loading it and routing with it is tested), every router's top-k indices are
counted, and before each optimizer step bias += d - mean(d), d = COEFF sign(mean(n) - n). The
bias after the last step is stored as buffer/<name>.

Run by hand where torch is installed (CI has no torch; tools/oracle/README.md):
  /tmp/venv/bin/python tools/oracle/moe_oracle.py tests/data/oracle
"""
import json
import os
import sys

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402  (the shared run: batches, init, training loop, versions)

SCRIPT = "tools/oracle/moe_oracle.py"
AUX_COEF = 0.05  # router_aux_loss_coef of the mixtral-aux case
COEFF = 0.02  # model.moe.load_balance_coeff of the deepseek-v3 case (torchtitan's default 1e-3
              # would move the bias too little in 3 steps to change a route)


def make_mixtral(aux_loss_coef=None):
    cfg = transformers.MixtralConfig(
        vocab_size=oracle.VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, sliding_window=None,
        num_local_experts=4, num_experts_per_tok=2, router_jitter_noise=0.0,
        output_router_logits=aux_loss_coef is not None,
        router_aux_loss_coef=aux_loss_coef if aux_loss_coef is not None else 0.001)
    cfg._attn_implementation = "eager"
    return transformers.MixtralForCausalLM(cfg)


def make_qwen3_moe():
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=oracle.VOCAB, hidden_size=32, intermediate_size=64, moe_intermediate_size=24,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=12,
        max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=False, num_experts=8, num_experts_per_tok=3, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=False,
        use_sliding_window=False, attention_bias=False)
    cfg._attn_implementation = "eager"
    return transformers.Qwen3MoeForCausalLM(cfg)


def make_deepseek_v3():
    cfg = transformers.DeepseekV3Config(
        vocab_size=oracle.VOCAB, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
        num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=12, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=12, n_routed_experts=8, num_experts_per_tok=2,
        n_group=4, topk_group=2, n_shared_experts=1, routed_scaling_factor=2.5,
        norm_topk_prob=True, topk_method="noaux_tc", rope_interleave=True,
        max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=False, attention_bias=False)
    cfg._attn_implementation = "eager"
    return transformers.DeepseekV3ForCausalLM(cfg)


def hub_names(model, tensors):
    """{name in memory: tensor} -> {hub file name: tensor}: the fused experts split per expert
    (gate_up_proj rows [0, F) are gate_proj / w1, [F, 2F) up_proj / w3; down_proj is down_proj /
    w2), Mixtral's MoE block renamed block_sparse_moe."""
    mixtral = model.config.model_type == "mixtral"
    out = {}
    for n, t in tensors.items():
        block = n.replace(".mlp.", ".block_sparse_moe.") if mixtral else n
        if n.endswith(".experts.gate_up_proj"):
            base = block[: -len("gate_up_proj")]
            f = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{base}{e}.{'w1' if mixtral else 'gate_proj'}.weight"] = t[e, :f]
                out[f"{base}{e}.{'w3' if mixtral else 'up_proj'}.weight"] = t[e, f:]
        elif n.endswith(".experts.down_proj"):
            base = block[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{base}{e}.{'w2' if mixtral else 'down_proj'}.weight"] = t[e]
        else:
            out[block if ".mlp.gate." in n else n] = t
    return out


class ExpertBias:
    """torchtitan's expert-bias update (NOTE [Expert bias]) on Hugging Face's DeepSeek-V3 routers."""

    def __init__(self, model, coeff):
        self.coeff = coeff
        self.routers = [m for m in model.modules() if type(m).__name__ == "DeepseekV3TopkRouter"]
        self.counts = {id(r): torch.zeros(r.num_experts) for r in self.routers}
        for r in self.routers:
            r.register_forward_hook(self.count)

    def count(self, router, inputs, output):
        indices = output[2]
        self.counts[id(router)] += torch.bincount(indices.flatten(), minlength=router.num_experts).float()

    def update(self):
        with torch.no_grad():
            for r in self.routers:
                n = self.counts[id(r)]
                d = self.coeff * torch.sign(n.mean() - n)
                r.e_score_correction_bias.add_(d - d.mean())
                n.zero_()


def write_moe_case(out_dir, name, model, scenario_extra, bias_coeff=None, weights_from=None):
    """weights_from: a case of the same architecture and weights, whose model.safetensors the
    scenario names instead of a copy."""
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    oracle.init_weights(model)
    bias = None
    if bias_coeff is not None:
        g = torch.Generator().manual_seed(oracle.WEIGHT_SEED + 1)
        bias = ExpertBias(model, bias_coeff)
        with torch.no_grad():
            for r in bias.routers:
                r.e_score_correction_bias.copy_(0.05 * torch.randn(r.num_experts, generator=g))
    weights = os.path.join("..", weights_from, "model.safetensors") if weights_from else "model.safetensors"
    if weights_from:
        model.config.save_pretrained(d)
    else:
        model.save_pretrained(d, safe_serialization=True)
    gen = os.path.join(d, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    # The file holds the hub's names: check hub_names maps the model's tensors onto them.
    initial = hub_names(model, dict(model.named_parameters()) | dict(model.named_buffers()))
    with safe_open(os.path.join(d, weights), "pt") as f:
        stored = set(f.keys())
        for k in stored:
            assert torch.equal(f.get_tensor(k), initial[k].detach()), k
    expected = {k for k in initial if "rotary_emb" not in k}
    assert stored == expected, (sorted(stored ^ expected))[:8]

    batches = [oracle.fill_batch(oracle.CORPUS, oracle.SEED, s, 0, oracle.BATCH, oracle.SEQ)
               for s in range(oracle.STEPS)]
    losses, norms, grads, logits = oracle.train(
        model, batches, torch.float32, pre_step=bias.update if bias else None)
    ref = oracle.run_record(batches, losses, norms, logits)
    for n, g in hub_names(model, grads).items():
        ref["grad/" + n] = g.float().contiguous()
    for n, p in hub_names(model, dict(model.named_parameters())).items():
        ref["param/" + n] = p.detach().float().contiguous()
    if bias:
        for n, b in hub_names(model, dict(model.named_buffers())).items():
            if n.endswith("e_score_correction_bias"):
                ref["buffer/" + n] = b.detach().float().contiguous()
    meta = oracle.reference_metadata(torch.float32, SCRIPT)
    if bias:
        meta["expert_bias_coeff"] = str(bias_coeff)
    save_file(ref, os.path.join(d, "reference.safetensors"), metadata=meta)
    oracle.write_scenario(d, name, weights, scenario_extra, SCRIPT)
    print(f"{name}: loss {['%.6f' % l for l in losses]} grad_norm {['%.4f' % n for n in norms]}")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/oracle"
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    write_moe_case(out_dir, "mixtral", make_mixtral(), {})
    # The auxiliary load-balancing loss (NOTE [Auxiliary load-balancing loss] in
    # core/model/moe_aux_loss.h) at a coefficient that moves the gradients well past the
    # tolerance (the published configs' 0.001 or 0.02 would too, less clearly).
    write_moe_case(out_dir, "mixtral-aux", make_mixtral(AUX_COEF), {}, weights_from="mixtral")
    write_moe_case(out_dir, "qwen3-moe", make_qwen3_moe(), {})
    write_moe_case(out_dir, "deepseek-v3", make_deepseek_v3(),
                   {"model": {"moe": {"load_balance_coeff": COEFF},
                              # torchtitan's RoPE, the file's adjacent pairs (NOTE [Rotary
                              # pairing of weight files] in core/checkpoint/hf_names.h)
                              "implementation": {"rope": "complex"}}}, bias_coeff=COEFF)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")


if __name__ == "__main__":
    main()
