"""The anchor for bench/generate_bench: Hugging Face transformers + PyTorch on the same checkpoint,
same prompts and same figures, printed as JSON.
    python3 bench/anchor_transformers.py MODEL_DIR [--new-tokens 32] [--prefill 128,1024]
        [--device cpu|cuda] [--batches 1,16]
With a static cache on CUDA, transformers compiles the decode step with torch.compile itself: the
first call of each batch size includes that compilation.
"""
import argparse
import json
import resource
import time

import torch
from transformers import AutoModelForCausalLM


def prompt_of(length, batch=1):
    return torch.arange(1000, 1000 + length).unsqueeze(0).repeat(batch, 1)


def timed_generate(model, ids, new_tokens):
    start = time.perf_counter()
    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                       max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       cache_implementation="static", pad_token_id=0)
    if ids.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prefill", default="128,1024")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", default="")
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(torch.get_num_threads())
    out = {"torch": torch.__version__, "threads": torch.get_num_threads()}
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).to(args.device).eval()
    out["load_s"] = time.perf_counter() - start
    prompt = prompt_of(16).to(args.device)
    out["first_call_s"] = timed_generate(model, prompt, args.new_tokens)
    one = min(timed_generate(model, prompt, 1) for _ in range(2))
    full = timed_generate(model, prompt, args.new_tokens)
    out["decode_tokens_per_s"] = (args.new_tokens - 1) / (full - one)
    out["peak_rss_mib_after_decode"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for batch in [int(x) for x in args.batches.split(",") if x]:
        prompts = prompt_of(16, batch).to(args.device)
        first = timed_generate(model, prompts, args.new_tokens)
        one = min(timed_generate(model, prompts, 1) for _ in range(2))
        full = timed_generate(model, prompts, args.new_tokens)
        out.setdefault("batches", {})[str(batch)] = {
            "first_call_ms": first * 1e3,
            "decode_tokens_per_s": batch * (args.new_tokens - 1) / (full - one)}
    out["prefill_ms"] = {}
    for length in [int(x) for x in args.prefill.split(",")]:
        ids = prompt_of(length).to(args.device)
        timed_generate(model, ids, 1)
        out["prefill_ms"][str(length)] = timed_generate(model, ids, 1) * 1e3
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
