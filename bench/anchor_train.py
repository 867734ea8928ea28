"""The anchor for bench/train_bench: transformers + PyTorch train the same config (fresh weights,
f32, AdamW, random token rows) for the same steps; prints the same figures as JSON.
    python3 bench/anchor_train.py CONFIG_JSON [--batch 16] [--seq 256] [--steps 8] [--compile]
        [--device cpu|cuda] [--bf16]
--bf16 trains as transformers' Trainer with bf16=True: f32 weights and optimizer state, the
forward and loss under torch.autocast(bfloat16).
"""
import contextlib
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
    parser.add_argument("--bf16", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(args.config)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(args.device).train()
    step_fn = torch.compile(model) if args.compile else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, config.vocab_size, (args.steps + 1, args.batch, args.seq))

    device_type = torch.device(args.device).type
    autocast = (torch.autocast(device_type=device_type, dtype=torch.bfloat16) if args.bf16
                else contextlib.nullcontext())

    def step(i):
        batch = ids[i].to(args.device)
        with autocast:
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
        "peak_device_mib": (torch.cuda.max_memory_allocated() / 2**20
                            if device_type == "cuda" else None),
    }))


if __name__ == "__main__":
    main()
