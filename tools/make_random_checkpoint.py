"""Makes a checkpoint shaped like a published model, with random weights, using transformers.

Used by the benchmarks: nothing large is shipped; this makes it on the machine that measures.
    python3 tools/make_random_checkpoint.py --shape qwen3-0.6b --dtype bfloat16 --out /tmp/qwen3-0.6b
--architecture llama makes a LlamaForCausalLM of the same shape (Qwen3 without its q/k norms: the
same products and bytes within 0.01%), which llama.cpp snapshots older than Qwen3 convert to GGUF.
--shape qwen3-30b-a3b-4layers: Qwen/Qwen3-30B-A3B's shape (a Qwen3MoeForCausalLM, 128 experts of
which 8 a token) with 4 of its 48 layers.
Needs: pip install torch transformers safetensors.
"""
import argparse
import os
import shutil

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config, Qwen3MoeConfig

# The config.json of Qwen/Qwen3-0.6B as published (architecture fields).
SHAPES = {
    "qwen3-0.6b": dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, max_position_embeddings=40960, rope_theta=1000000.0,
                       rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=151643,
                       eos_token_id=151645),
    # Qwen/Qwen3-30B-A3B's config.json as published, its 48 layers cut to 4.
    "qwen3-30b-a3b-4layers": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                                  moe_intermediate_size=768, num_hidden_layers=4,
                                  num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                                  num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
                                  decoder_sparse_step=1, mlp_only_layers=[],
                                  max_position_embeddings=40960, rope_theta=1000000.0,
                                  rms_norm_eps=1e-6, tie_word_embeddings=False,
                                  bos_token_id=151643, eos_token_id=151645),
}
# The architecture a shape is of, where it is not the --architecture choice.
MOE_SHAPES = {"qwen3-30b-a3b-4layers"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="qwen3-0.6b", choices=sorted(SHAPES))
    parser.add_argument("--architecture", default="qwen3", choices=["qwen3", "llama"])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    if args.shape in MOE_SHAPES:
        config_class = Qwen3MoeConfig
    else:
        config_class = Qwen3Config if args.architecture == "qwen3" else LlamaConfig
    config = config_class(**SHAPES[args.shape])
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, args.dtype))
    model.save_pretrained(args.out)
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(here, "..", "data", "qwen3-tokenizer", name), args.out)
    print(args.out)


if __name__ == "__main__":
    main()
