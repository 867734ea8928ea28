"""Makes the extra reference fixtures (qwen2, llama3-rope, qwen3-yarn) in tests/data/fixtures.

Same procedure and reference.json layout as shared/tools/make_fixtures.py (seeded random weights,
rescaled so logits differ clearly; `input_ids` [2,12] with their `logits`; a left-padded batch and
its `greedy_16` with a static cache), without the training fields. CPU, float32.

Needs: pip install torch transformers safetensors. Run from the repository root:
    python3 tools/make_extra_fixtures.py
"""
import json
import math
import os

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

DEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "fixtures")
SEED = 0

COMMON = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)


def configs():
    # Qwen2 hard-wires biases on q/k/v; untied lm_head as in the larger Qwen2 checkpoints.
    qwen2 = Qwen2Config(**COMMON, rms_norm_eps=1e-6, tie_word_embeddings=False,
                        use_sliding_window=False,
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    # original_max_position_embeddings 32 puts the head_dim-16 frequencies (wavelengths 6.3, 20,
    # 63, ...) in all three llama3 bands: kept, smoothed and divided by factor.
    llama3 = LlamaConfig(**COMMON, head_dim=16, rms_norm_eps=1e-5, tie_word_embeddings=False,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0,
                                          "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 32})
    # A short original context so the yarn ramp and its attention factor apply at these lengths;
    # max_position_embeddings = factor * original, the ratio transformers expects.
    qwen3_yarn = Qwen3Config(**{**COMMON, "vocab_size": 1024, "max_position_embeddings": 64},
                             head_dim=16, rms_norm_eps=1e-6,
                             tie_word_embeddings=True,
                             rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                              "factor": 4.0,
                                              "original_max_position_embeddings": 16})
    return {"qwen2": qwen2, "llama3-rope": llama3, "qwen3-yarn": qwen3_yarn}


def random_model(cfg):
    """The architecture of `cfg` with seeded weights, less degenerate than the default init so
    logits differ clearly (as make_fixtures.py), in float32."""
    torch.manual_seed(SEED + 17)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.6 / math.sqrt(p.shape[-1])))
    return model


def inference_reference(model, cfg):
    """reference.json's inference fields: `input_ids` [2,12] and their `logits`; the batch
    left-padded and its `greedy_16` with a static cache. Returns (fields, generated ids)."""
    g = torch.Generator().manual_seed(SEED + 99)
    ids = torch.randint(3, cfg.vocab_size, (2, 12), generator=g)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    ref = {"input_ids": ids.tolist(), "logits": logits.tolist()}
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    ids_p = ids.clone()
    ids_p[1, :4] = cfg.pad_token_id
    with torch.no_grad():
        out = model.generate(input_ids=ids_p, attention_mask=mask, do_sample=False,
                             max_new_tokens=16, cache_implementation="static",
                             disable_compile=True, pad_token_id=cfg.pad_token_id,
                             eos_token_id=None)
    ref["padded_input_ids"] = ids_p.tolist()
    ref["padded_attention_mask"] = mask.tolist()
    ref["greedy_16"] = out.tolist()
    return ref, out


def make(name, cfg):
    model = random_model(cfg)
    out_dir = os.path.join(DEST, name)
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(out_dir, "model.safetensors"), 0o644)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        f.write(cfg.to_json_string())

    ref, out = inference_reference(model, cfg)
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(ref, f)
    size = os.path.getsize(os.path.join(out_dir, "model.safetensors"))
    print(name, "checkpoint bytes", size, "greedy row 0", out[0, 12:].tolist(), flush=True)


if __name__ == "__main__":
    print("torch", torch.__version__, "transformers", transformers.__version__)
    for name, cfg in configs().items():
        make(name, cfg)
