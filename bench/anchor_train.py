"""The anchor for bench/train_bench: transformers + PyTorch train the same config (fresh weights,
f32, AdamW, random token rows) for the same steps; prints the same figures as JSON.
    python3 bench/anchor_train.py CONFIG_JSON [--batch 16] [--seq 256] [--steps 8] [--compile]
"""
import argparse
import json
import resource
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(args.config)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(args.device).train()
    step_fn = torch.compile(model) if args.compile else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, config.vocab_size, (args.steps + 1, args.batch, args.seq))

    def step(i):
        batch = ids[i].to(args.device)
        loss = step_fn(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()

    start = time.perf_counter()
    step(0)
    first = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(1, args.steps + 1):
        step(i)
    elapsed = time.perf_counter() - start
    print(json.dumps({
        "torch": torch.__version__, "threads": torch.get_num_threads(), "compile": args.compile,
        "tokens_per_s": args.batch * args.seq * args.steps / elapsed,
        "first_step_ms": first * 1e3,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


if __name__ == "__main__":
    main()
