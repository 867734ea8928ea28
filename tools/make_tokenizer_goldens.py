#!/usr/bin/env python3
"""Makes the tokenizer goldens under tests/data/tokenizers/ with Hugging Face tokenizers and
transformers (pip install tokenizers transformers jinja2; torch is not needed).

  python3 tools/make_tokenizer_goldens.py

1. Trains two small tokenizers on data/tinyshakespeare/input.txt and writes their tokenizer.json:
   gpt2-style/ (byte-level BPE laid out like GPT-2's) and sentencepiece-style/ (BPE with byte
   fallback and unk laid out like Llama-2's), plus variants/ that reuse those models under other
   normalizers, pre-tokenizers and added-token flags.
2. Encodes and decodes a fixed list of texts with each of them and with the real Qwen3 tokenizer
   (data/qwen3-tokenizer) and writes <name>/golden.json.
3. Renders Qwen3's chat template with transformers for several conversations (chat-golden.json)
   and pads/truncates batches with transformers (batch-golden.json).
"""
import json
import os
import random

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tokenizers")
SHAKESPEARE = os.path.join(ROOT, "data", "tinyshakespeare", "input.txt")
QWEN3 = os.path.join(ROOT, "data", "qwen3-tokenizer")

TEXTS = [
    "",
    "The French Bread Law states",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "Hello, world! It's 2026-11-29 and I've 12345 apples (3.14159).",
    "  leading spaces\n\n\ttabs and\r\nCRLF   trailing   ",
    "def f(x):\n    return x**2  # comment\n\n\nclass A:\n\tpass\n",
    "多语言文本：AWS Trainium 实例通过 torch-neuronx 包原生运行 PyTorch。",
    "Emoji 🤗🚀 and accents: café naïve Zürich — ñ 👩‍👩‍👧",
    "ÀÁÂ e\u0301 \u00e9 NFC vs NFD \u212b \ufb01 \u2460",
    "Русский текст и العربية и हिन्दी and 日本語のテキスト",
    "I'M SHOUTING, you're whispering; they'd've LL ll 'S 's",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "x<|endoftext|>y <|endoftext|> z<think>\nhmm\n</think>\n\nok",
    "<s>Hello</s> <unk> [MASK]  <mask> word<sep>  next",
    "a" * 300 + " " + "xyz" * 50,
    "1234567890 ١٢٣ ⅷ 3rd 42nd",
    "tab\there\u00a0nbsp\u3000ideographic\u2028line sep",
    "\u0000null and \x7f del",
]


def shakespeare_texts(count, rng):
    lines = open(SHAKESPEARE, encoding="utf-8").read().split("\n\n")
    return [rng.choice(lines) for _ in range(count)]


def train_gpt2_style(text_file):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train([text_file], trainer)
    return tok


def train_sentencepiece_style(text_file):
    """Like Llama-2's tokenizer.json: <unk> <s> </s>, then <0x00>..<0xFF>, then merged tokens."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=70, show_progress=False)
    tok.train([text_file], trainer)
    spec = json.loads(tok.to_str())
    trained = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for token, _ in trained:
        vocab.setdefault(token, len(vocab))
    spec["model"]["vocab"] = vocab
    spec["added_tokens"] = [
        {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    spec["pre_tokenizer"] = None
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    return Tokenizer.from_str(json.dumps(spec))


def variants(gpt2, sentencepiece):
    """The same models under other pipeline settings, to cover what the two above do not."""
    out = {}
    # Mistral-style: Metaspace pre-tokenizer and decoder instead of Prepend+Replace.
    spec = json.loads(sentencepiece.to_str())
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁",
                             "prepend_scheme": "first", "split": False}
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    out["metaspace"] = Tokenizer.from_str(json.dumps(spec))
    # Byte-level with normalizers, digit splitting, a prefix space, ignore_merges and added
    # tokens with lstrip/rstrip/single_word/normalized flags.
    tok = Tokenizer.from_str(gpt2.to_str())
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), normalizers.Lowercase(), normalizers.Replace("``", '"'),
         normalizers.Strip(left=False, right=True)])
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.Split("-", behavior="merged_with_previous"),
         pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True),
                            AddedToken("[MASK]", single_word=True, special=True)])
    tok.add_tokens([AddedToken("<sep>", rstrip=True, normalized=False),
                    AddedToken("word", normalized=True)])
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = True
    out["bytelevel-variants"] = Tokenizer.from_str(json.dumps(spec))
    # Whitespace pre-tokenizer over the sentencepiece model with NFD.
    spec = json.loads(sentencepiece.to_str())
    spec["normalizer"] = {"type": "NFD"}
    spec["pre_tokenizer"] = {"type": "Whitespace"}
    out["whitespace-nfd"] = Tokenizer.from_str(json.dumps(spec))
    return out


def golden(tok, texts):
    entries = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        entries.append({
            "text": text, "ids": ids,
            "ids_with_special": tok.encode(text, add_special_tokens=True).ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    return entries


def write(name, tok, texts, save_tokenizer=True):
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    if save_tokenizer:
        tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden(tok, texts), f, ensure_ascii=False, indent=1)


CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "Name a prime."}],
    [{"role": "system", "content": "Be kind."},
     {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "<think>\nThe user greets.\n</think>\n\nHello!"},
     {"role": "user", "content": "How are you?"}],
    [{"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke."},
     {"role": "assistant", "content": "<think>\nPick one.\n</think>\nWhy did the chicken..."}],
    [{"role": "user", "content": "多语言 🤗 \"quotes\" and\nnewlines"},
     {"role": "assistant", "content": "Sure."},
     {"role": "system", "content": "late system"}],
]


def chat_goldens():
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(QWEN3)
    entries = []
    for messages in CONVERSATIONS:
        for add_generation_prompt in (False, True):
            for enable_thinking in (True, False):
                text = tok.apply_chat_template(messages, tokenize=False,
                                               add_generation_prompt=add_generation_prompt,
                                               enable_thinking=enable_thinking)
                entries.append({"messages": messages, "add_generation_prompt": add_generation_prompt,
                                "enable_thinking": enable_thinking, "text": text,
                                "ids": tok(text, add_special_tokens=False)["input_ids"]})
    with open(os.path.join(OUT, "qwen3", "chat-golden.json"), "w", encoding="utf-8") as f:
        json.dump(entries, f, ensure_ascii=False, indent=1)

    texts = ["Hello world", "A much longer sentence that will need truncation at some point.", "x"]
    batches = []
    for side in ("right", "left"):
        tok.padding_side = side
        for kwargs in ({"padding": True}, {"padding": "max_length", "max_length": 16},
                       {"padding": True, "truncation": True, "max_length": 5}):
            out = tok(texts, **kwargs)
            batches.append({"padding_side": side, "options": kwargs, "texts": texts,
                            "input_ids": out["input_ids"], "attention_mask": out["attention_mask"]})
    with open(os.path.join(OUT, "qwen3", "batch-golden.json"), "w", encoding="utf-8") as f:
        json.dump(batches, f, ensure_ascii=False, indent=1)


def main():
    rng = random.Random(0)
    texts = TEXTS + shakespeare_texts(12, rng)
    gpt2 = train_gpt2_style(SHAKESPEARE)
    sentencepiece = train_sentencepiece_style(SHAKESPEARE)
    write("gpt2-style", gpt2, texts)
    write("sentencepiece-style", sentencepiece, texts)
    for name, tok in variants(gpt2, sentencepiece).items():
        write(name, tok, texts)
    # The real Qwen3 tokenizer stays in data/; only its goldens go here.
    write("qwen3", Tokenizer.from_file(os.path.join(QWEN3, "tokenizer.json")), texts,
          save_tokenizer=False)
    chat_goldens()


if __name__ == "__main__":
    main()
