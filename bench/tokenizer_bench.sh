#!/usr/bin/env bash
# Encode throughput and load time of tfm vs Hugging Face tokenizers, same texts, same run.
#   bench/tokenizer_bench.sh [BUILD_DIR] [TOKENIZER_DIR]
# Needs: pip install tokenizers faker (faker makes the seeded multilingual sample offline).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tokenizer=${2:-data/qwen3-tokenizer}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 bench/tokenizer_anchor.py --make-multilingual "$work/multilingual.txt"
texts=(--text data/tinyshakespeare/input.txt --text "$work/multilingual.txt")
"$build/bench/tokenizer_bench" --tokenizer "$tokenizer" "${texts[@]}" > "$work/tfm.json"
python3 bench/tokenizer_anchor.py --tokenizer "$tokenizer" "${texts[@]}" > "$work/hf.json"
python3 - "$work/tfm.json" "$work/hf.json" <<'PY'
import json, os, sys
tfm, hf = (json.load(open(p)) for p in sys.argv[1:3])
print(f"{'text':<34}{'tfm MB/s':>10}{'HF MB/s':>10}{'ratio':>8}{'same ids':>10}")
for a, b in zip(tfm["files"], hf["files"]):
    for mode, rate, count in (("whole file", "mb_per_s", "tokens"),
                              ("line by line", "lines_mb_per_s", "line_tokens")):
        name = f"{os.path.basename(a['path'])}, {mode}"
        print(f"{name:<34}{a[rate]:>10.2f}{b[rate]:>10.2f}"
              f"{a[rate] / b[rate]:>7.1f}x{str(a[count] == b[count]):>10}")
print(f"load ms: tfm {tfm['load_ms']:.0f}, HF {hf['load_ms']:.0f}")
PY
