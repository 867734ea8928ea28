"""The anchor for attention's kernels: torch's scaled_dot_product_attention (its flash kernels on
a GPU) under the causal mask in bf16, forward and forward + backward, at one layer of the training
bench's shape (Qwen3-0.6B: 16 query and 8 KV heads of 128, batch 8 x 1024). Compare with the
attention and attention_grad lines of train_bench --profile (bench/cuda_profile.sh),
which are per layer too. Prints JSON.
    python3 bench/anchor_attention.py [--batch 8] [--seq 1024] [--heads 16] [--kv-heads 8]
        [--head-dim 128] [--device cuda] [--repeats 20]
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def timed_ms(fn, device, repeats):
    """The median time of fn() over `repeats` runs after three to warm up, in milliseconds."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            begin = time.perf_counter()
            fn()
            times.append((time.perf_counter() - begin) * 1e3)
    return sorted(times)[len(times) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    shape = (args.batch, args.heads, args.seq, args.head_dim)
    kv_shape = (args.batch, args.kv_heads, args.seq, args.head_dim)
    q = torch.randn(shape, device=args.device, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(kv_shape, device=args.device, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(kv_shape, device=args.device, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(shape, device=args.device, dtype=torch.bfloat16)

    def forward():
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def forward_backward():
        q.grad = k.grad = v.grad = None  # written, not added into
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        y.backward(dy)

    forward_ms = timed_ms(forward, args.device, args.repeats)
    both_ms = timed_ms(forward_backward, args.device, args.repeats)
    # Multiply-adds x 2 of the two [S, S] x head_dim products, half of them under the causal mask.
    product_flop = 2 * args.batch * args.heads * args.seq * args.seq * args.head_dim
    print(json.dumps({
        "anchor": "torch.nn.functional.scaled_dot_product_attention",
        "torch": torch.__version__, "device": args.device,
        "shape": {"batch": args.batch, "seq": args.seq, "heads": args.heads,
                  "kv_heads": args.kv_heads, "head_dim": args.head_dim},
        "forward_ms": round(forward_ms, 4),
        "backward_ms": round(both_ms - forward_ms, 4),
        # Counting the 2 products of the forward pass and the 5 of the backward pass (FlashAttention's
        # convention), causal halves.
        "forward_tflops": round(2 * product_flop / 2 / forward_ms / 1e9, 1),
        "backward_tflops": round(5 * product_flop / 2 / max(both_ms - forward_ms, 1e-9) / 1e9, 1),
    }))


if __name__ == "__main__":
    main()
