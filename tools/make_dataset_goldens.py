#!/usr/bin/env python3
"""Makes the dataset goldens under tests/data/training/dataset/ with Hugging Face datasets,
tokenizers and transformers (pip install datasets tokenizers transformers; no torch), offline.

  python3 tools/make_dataset_goldens.py

1. Writes small inputs: sample.txt (tinyshakespeare lines plus CRLF, lone CR, blank runs, non-ASCII
   text and no final newline), sample.jsonl ({"text": ...} records and a blank line) and
   sample_ids.jsonl ({"input_ids": [...]} records).
2. Reads them with `datasets.load_dataset` ("text" with sample_by line / paragraph / document and
   keep_linebreaks; "json"), tokenizes with the Qwen3 tokenizer through transformers, and shapes
   rows as transformers' examples do: run_clm.py's group_texts mapped with batched=True (1000
   examples per batch, and 7 to see the per-batch remainder), and
   tokenizer(padding="max_length", truncation=True) for padded rows.
3. Computes the row order of seeded epochs with a Python transcription of std::seed_seq,
   std::mt19937_64 and the Fisher-Yates shuffle described in src/training/dataset_shuffle.h.
4. Splits data/tinyshakespeare/input.txt as nanoGPT does (data[:int(n*0.9)], data[int(n*0.9):])
   and records the token count, first ids and an FNV-1a hash of each part's ids.
Writes golden.json.
"""
import json
import os
import tempfile
from itertools import chain

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "training", "dataset")
SHAKESPEARE = os.path.join(ROOT, "data", "tinyshakespeare", "input.txt")
QWEN3 = os.path.join(ROOT, "data", "qwen3-tokenizer")
MAX_LENGTH = 16


def write_inputs():
    with open(SHAKESPEARE, encoding="utf-8") as f:
        shakespeare = f.read()
    head = "".join(shakespeare.splitlines(keepends=True)[:30])
    sample = (head + "Über café — naïve 日本語 🤗 emoji\r\n" + "a CRLF line\r\n" +
              "lone CR\rafter the CR\n" + "\n\n\n" + "  indented, spaces kept  \n" + "x\n" +
              "the last line has no newline")
    with open(os.path.join(OUT, "sample.txt"), "wb") as f:
        f.write(sample.encode("utf-8"))

    paragraphs = shakespeare[:2500].split("\n\n")[:12]
    with open(os.path.join(OUT, "sample.jsonl"), "w", encoding="utf-8") as f:
        for i, p in enumerate(paragraphs):
            f.write(json.dumps({"id": i, "text": p}, ensure_ascii=False) + "\n")
            if i == 4:
                f.write("\n")  # blank lines are skipped
    return paragraphs


def group_texts(examples, block_size=MAX_LENGTH):
    """transformers/examples/pytorch/language-modeling/run_clm.py, verbatim but for block_size."""
    concatenated_examples = {k: list(chain(*examples[k])) for k in examples.keys()}
    total_length = len(concatenated_examples[list(examples.keys())[0]])
    total_length = (total_length // block_size) * block_size
    result = {
        k: [t[i:i + block_size] for i in range(0, total_length, block_size)]
        for k, t in concatenated_examples.items()
    }
    result["labels"] = result["input_ids"].copy()
    return result


def packed(tok, dataset, batch_size=1000):
    tokenized = dataset.map(lambda e: tok(e["text"]), batched=True, remove_columns=["text"])
    grouped = tokenized.map(group_texts, batched=True, batch_size=batch_size)
    return {k: list(grouped[k]) for k in ("input_ids", "attention_mask", "labels")}


def packed_ids(dataset, batch_size=1000):
    grouped = dataset.map(group_texts, batched=True, batch_size=batch_size)
    return {"input_ids": list(grouped["input_ids"]), "labels": list(grouped["labels"])}


def padded(tok, texts):
    enc = tok(texts, padding="max_length", truncation=True, max_length=MAX_LENGTH)
    rows = {"input_ids": [], "attention_mask": [], "labels": []}
    for ids, mask in zip(enc["input_ids"], enc["attention_mask"]):
        if sum(mask) < 2:  # no next-token target (src/training/dataset_rows.h)
            continue
        rows["input_ids"].append(ids)
        rows["attention_mask"].append(mask)
        rows["labels"].append([i if m else -100 for i, m in zip(ids, mask)])
    return rows


# --- std::seed_seq, std::mt19937_64 ([rand.util.seedseq], [rand.eng.mers]) and the shuffle.
M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


def seed_seq_generate(v, n):
    out = [0x8B8B8B8B] * n
    s = len(v)
    t = 11 if n >= 623 else 7 if n >= 68 else 5 if n >= 39 else 3 if n >= 7 else (n - 1) // 2
    p = (n - t) // 2
    q = p + t
    m = max(s + 1, n)

    def T(x):
        return x ^ (x >> 27)

    for k in range(m):
        r1 = (1664525 * T(out[k % n] ^ out[(k + p) % n] ^ out[(k - 1) % n])) & M32
        if k == 0:
            r2 = r1 + s
        elif k <= s:
            r2 = r1 + k % n + v[k - 1]
        else:
            r2 = r1 + k % n
        r2 &= M32
        out[(k + p) % n] = (out[(k + p) % n] + r1) & M32
        out[(k + q) % n] = (out[(k + q) % n] + r2) & M32
        out[k % n] = r2
    for k in range(m, m + n):
        r3 = (1566083941 * T((out[k % n] + out[(k + p) % n] + out[(k - 1) % n]) & M32)) & M32
        r4 = (r3 - k % n) & M32
        out[(k + p) % n] ^= r3
        out[(k + q) % n] ^= r4
        out[k % n] = r4
    return out


class MT19937_64:
    N, M = 312, 156
    UPPER, LOWER = 0xFFFFFFFF80000000, 0x7FFFFFFF

    def __init__(self, seed=None, seq=None):
        if seq is not None:
            words = seed_seq_generate(seq, 2 * self.N)
            self.x = [words[2 * i] | (words[2 * i + 1] << 32) for i in range(self.N)]
            if (self.x[0] & self.UPPER) == 0 and all(w == 0 for w in self.x[1:]):
                self.x[0] = 1 << 63
        else:
            self.x = [seed & M64]
            for i in range(1, self.N):
                prev = self.x[-1]
                self.x.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & M64)
        self.i = self.N

    def __call__(self):
        if self.i >= self.N:
            for k in range(self.N):
                y = (self.x[k] & self.UPPER) | (self.x[(k + 1) % self.N] & self.LOWER)
                self.x[k] = self.x[(k + self.M) % self.N] ^ (y >> 1) ^ (
                    0xB5026F5AA96619E9 if y & 1 else 0)
            self.i = 0
        z = self.x[self.i]
        self.i += 1
        z ^= (z >> 29) & 0x5555555555555555
        z ^= (z << 17) & 0x71D67FFFEDA60000
        z ^= (z << 37) & 0xFFF7EEE000000000
        z ^= z >> 43
        return z & M64


def uniform_below(rng, bound):
    threshold = (2**64 - bound) % bound
    while True:
        r = rng()
        if r >= threshold:
            return r % bound


def epoch_permutation(n, seed, epoch):
    rng = MT19937_64(seq=[seed & M32, seed >> 32 & M32, epoch & M32, epoch >> 32 & M32])
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = uniform_below(rng, i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def check_mt19937_64():
    rng = MT19937_64(seed=5489)
    for _ in range(9999):
        rng()
    assert rng() == 9981545732273789042, "MT19937-64 transcription is wrong"  # [rand.predef]


def fnv1a(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for b in (i & M32).to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001B3) & M64
    return h


def main():
    from datasets import load_dataset
    from transformers import AutoTokenizer

    check_mt19937_64()
    os.makedirs(OUT, exist_ok=True)
    paragraphs = write_inputs()
    tok = AutoTokenizer.from_pretrained(QWEN3)
    cache = tempfile.mkdtemp()
    txt = os.path.join(OUT, "sample.txt")

    def text(**config):
        return load_dataset("text", data_files=txt, split="train", cache_dir=cache, **config)

    lines = text()
    line_texts = list(lines["text"])
    golden = {"max_length": MAX_LENGTH, "text_loader": {
        "line": line_texts,
        "line_keep_linebreaks": list(text(keep_linebreaks=True)["text"]),
        "paragraph": list(text(sample_by="paragraph")["text"]),
        "document": list(text(sample_by="document")["text"]),
    }}
    jsonl = load_dataset("json", data_files=os.path.join(OUT, "sample.jsonl"), split="train",
                         cache_dir=cache)
    golden["jsonl_loader"] = list(jsonl["text"])
    assert golden["jsonl_loader"] == paragraphs

    golden["tokenized_lines"] = tok(line_texts)["input_ids"]
    golden["packed_lines"] = packed(tok, lines)
    golden["packed_lines_group_7"] = packed(tok, lines, batch_size=7)
    golden["padded_lines"] = padded(tok, line_texts)

    ids_records = [{"input_ids": ids} for ids in tok(paragraphs[:6])["input_ids"]]
    with open(os.path.join(OUT, "sample_ids.jsonl"), "w") as f:
        for record in ids_records:
            f.write(json.dumps(record) + "\n")
    ids = load_dataset("json", data_files=os.path.join(OUT, "sample_ids.jsonl"), split="train",
                       cache_dir=cache)
    golden["packed_ids"] = packed_ids(ids)

    golden["permutations"] = [
        {"n": n, "seed": seed, "epoch": epoch, "order": epoch_permutation(n, seed, epoch)}
        for n, seed, epoch in [(10, 42, 0), (10, 42, 1), (10, 43, 0), (1, 42, 0),
                               (37, 2**40 + 3, 2**33 + 1), (200, 1234, 5)]
    ]

    with open(SHAKESPEARE, encoding="utf-8") as f:
        data = f.read()
    n = len(data)
    parts = {"train": data[:int(n * 0.9)], "validation": data[int(n * 0.9):]}
    golden["tinyshakespeare"] = {"characters": n}
    for name, part in parts.items():
        part_ids = tok(part)["input_ids"]
        golden["tinyshakespeare"][name] = {
            "characters": len(part), "starts_with": part[:40], "tokens": len(part_ids),
            "first_ids": part_ids[:32], "fnv1a": str(fnv1a(part_ids)),
            "blocks_of_256": len(part_ids) // 256,
        }

    with open(os.path.join(OUT, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
