#!/usr/bin/env python3
"""Hugging Face tokenizers on the same measurements as tokenizer_bench.cc, printed as JSON.

  python3 bench/tokenizer_anchor.py --tokenizer data/qwen3-tokenizer --text a.txt [--repeat 5]
  python3 bench/tokenizer_anchor.py --make-multilingual out.txt   # the multilingual sample
"""
import argparse
import json
import os
import time

# Single-threaded, like tokenizer_bench: encode_batch of the lines then runs on one thread.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Tokenizer  # noqa: E402

LOCALES = ["zh_CN", "ja_JP", "ru_RU", "ar_AA", "hi_IN", "ko_KR", "de_DE", "fr_FR", "es_ES",
           "el_GR", "he_IL", "th_TH", "en_US"]


def make_multilingual(path, size=1_000_000):
    """About 1 MB of paragraphs in 13 languages from Faker's word lists (seeded, offline)."""
    from faker import Faker
    fakes = [Faker(locale) for locale in LOCALES]
    Faker.seed(0)
    parts, total, i = [], 0, 0
    while total < size:
        paragraph = fakes[i % len(fakes)].paragraph(nb_sentences=6) + "\n\n"
        parts.append(paragraph)
        total += len(paragraph.encode("utf-8"))
        i += 1
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(parts))


def best_seconds(repeat, encode):
    """Best of `repeat` timed calls after a warm-up call that fills the word cache."""
    tokens = encode()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        tokens = encode()
        best = min(best, time.perf_counter() - start)
    return best, tokens


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer", default="data/qwen3-tokenizer")
    parser.add_argument("--text", action="append", default=[])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--make-multilingual")
    args = parser.parse_args()
    if args.make_multilingual:
        make_multilingual(args.make_multilingual)
        return
    path = args.tokenizer
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    load_s = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        tok = Tokenizer.from_file(path)
        load_s = min(load_s, time.perf_counter() - start)
    result = {"impl": "huggingface-tokenizers", "load_ms": load_s * 1e3, "files": []}
    for text_path in args.text:
        text = open(text_path, encoding="utf-8").read()
        lines = text.splitlines(keepends=True)
        mb = len(text.encode("utf-8")) / 1e6
        whole, tokens = best_seconds(args.repeat, lambda: len(
            tok.encode(text, add_special_tokens=False).ids))
        by_line, line_tokens = best_seconds(args.repeat, lambda: sum(
            len(e.ids) for e in tok.encode_batch(lines, add_special_tokens=False)))
        result["files"].append({"path": text_path, "bytes": int(mb * 1e6), "tokens": tokens,
                                "mb_per_s": mb / whole, "line_tokens": line_tokens,
                                "lines_mb_per_s": mb / by_line})
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
