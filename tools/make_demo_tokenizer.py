#!/usr/bin/env python3
"""Trains the demo model's tokenizer: byte-level BPE (as Qwen3's, so tfm's tokenizer runs it the
same way) with a small vocabulary, on the training part (first 90% of characters) of
tinyshakespeare, with Hugging Face tokenizers from PyPI. Only the tokenizer is made here; the
model itself is trained by tfm (`make demo-model`).

    python3 tools/make_demo_tokenizer.py data/tinyshakespeare/input.txt models/shakespeare
"""
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB_SIZE = 2048
SPECIAL = ["<|endoftext|>"]


def main(text_path: str, out_dir: str) -> None:
    text = Path(text_path).read_text(encoding="utf-8")
    train = text[: int(len(text) * 0.9)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(train.splitlines(keepends=True), trainer)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": SPECIAL[0],
        "pad_token": SPECIAL[0],
        "model_max_length": 512,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"vocab {tok.get_vocab_size()}, {len(tok.encode(train).ids)} training tokens")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
