"""Makes the fixtures of the mixture-of-experts and Mistral architectures (qwen3-moe, mixtral,
mistral) in tests/data/fixtures, with every field make_fixtures.py writes: logits, a left-padded
batch's greedy_16 (static cache), train_loss0, per-weight grad_norms and three AdamW steps' losses.

Checkpoints are written by save_pretrained, so expert weights carry their names as published
(transformers 5 holds them fused in memory; grad_norms name the published tensors, each norm taken
over its slice of the fused gradient, checked against the saved weights). The MoE configs set
output_router_logits, so train_loss0 and the AdamW losses include the load-balancing loss
(router_aux_loss_coef); `lm_loss0` and `aux_loss0` hold its parts. Mistral's sliding window (8) is
shorter than the generated rows, so the window matters. CPU, float32, seeds 17 (weights) and 99
(ids), as make_extra_fixtures.py.

Needs: pip install torch transformers safetensors. Run from the repository root:
    python3 tools/make_moe_fixtures.py
"""
import json
import os
import tempfile

import torch
import transformers
from safetensors.torch import load_file
from transformers import MistralConfig, MixtralConfig, Qwen3MoeConfig

from make_extra_fixtures import DEST, inference_reference, random_model
COMMON = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
              pad_token_id=0, rms_norm_eps=1e-6)


def configs():
    qwen3_moe = Qwen3MoeConfig(**COMMON, head_dim=16, intermediate_size=128,
                               moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                               norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                               output_router_logits=True, router_aux_loss_coef=0.02,
                               tie_word_embeddings=False,
                               rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    mixtral = MixtralConfig(**COMMON, intermediate_size=48, num_local_experts=8,
                            num_experts_per_tok=2, output_router_logits=True,
                            router_aux_loss_coef=0.02, tie_word_embeddings=False,
                            sliding_window=None,
                            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    mistral = MistralConfig(**COMMON, intermediate_size=128, sliding_window=8, head_dim=16,
                            tie_word_embeddings=False,
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return {"qwen3-moe": qwen3_moe, "mixtral": mixtral, "mistral": mistral}


# Published expert names -> (fused parameter name, expert, part): part 0/1 = the gate/up halves of
# gate_up_proj, None = the whole expert slice.
EXPERT_PARTS = {"gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
                "down_proj": ("down_proj", None),
                "w1": ("gate_up_proj", 0), "w3": ("gate_up_proj", 1), "w2": ("down_proj", None)}


def fused_slice(name, tensors):
    """The slice of a fused parameter (or gradient) behind a published tensor name."""
    parts = name.split(".")
    if "experts" not in parts:
        return tensors[name.replace("block_sparse_moe", "mlp")]
    i = parts.index("experts")
    expert, kind = int(parts[i + 1]), parts[i + 2]
    fused, half = EXPERT_PARTS[kind]
    base = ".".join(parts[:i]).replace("block_sparse_moe", "mlp") + ".experts." + fused
    block = tensors[base][expert]
    if half is None:
        return block
    rows = block.shape[0] // 2
    return block[half * rows:(half + 1) * rows]


def make(name, cfg):
    model = random_model(cfg)
    out_dir = os.path.join(DEST, name)
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        saved = load_file(os.path.join(tmp, "model.safetensors"))
        for f in ("model.safetensors", "config.json"):
            os.replace(os.path.join(tmp, f), os.path.join(out_dir, f))
    os.chmod(os.path.join(out_dir, "model.safetensors"), 0o644)
    params = dict(model.named_parameters())
    for n, t in saved.items():
        assert torch.equal(fused_slice(n, params).detach(), t), n

    # Inference leaves the router's loss out (transformers' generate() fails computing it under a
    # padding mask); training puts it back, as config.json says.
    router_loss = getattr(cfg, "output_router_logits", False)
    model.config.output_router_logits = False
    ref, out = inference_reference(model, cfg)
    ids = torch.tensor(ref["input_ids"])

    model.config.output_router_logits = router_loss
    model.train()
    labels = ids.clone()
    outputs = model(input_ids=ids, labels=labels)
    outputs.loss.backward()
    ref["train_loss0"] = outputs.loss.item()
    if getattr(outputs, "aux_loss", None) is not None:
        ref["aux_loss0"] = outputs.aux_loss.item()
        ref["lm_loss0"] = outputs.loss.item() - cfg.router_aux_loss_coef * outputs.aux_loss.item()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    ref["grad_norms"] = {n: fused_slice(n, grads).norm().item() for n in saved
                         if n.replace("block_sparse_moe", "mlp") in grads or "experts" in n}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    losses = []
    opt.step()
    opt.zero_grad()
    for _ in range(3):
        loss = model(input_ids=ids, labels=labels).loss
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    ref["adamw"] = {"lr": 1e-2, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1,
                    "losses_after_steps_1_2_3": losses}
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(ref, f)
    print(name, "weights", len(saved), "loss0", ref["train_loss0"], "greedy row 0",
          out[0, 12:].tolist(), flush=True)


if __name__ == "__main__":
    print("torch", torch.__version__, "transformers", transformers.__version__)
    for name, cfg in configs().items():
        make(name, cfg)
