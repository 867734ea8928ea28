#!/usr/bin/env bash
# tfm vs transformers training on CPU, same config (the demo model's), same batch and steps, one
# run; prints both and the ratios.   bench/cpu_train.sh [BUILD_DIR] [CONFIG_JSON]
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
config=${2:-$here/../demo/qwen3-shakespeare.json}
tfm=$("$build/bench/train_bench" "$config" --batch 16 --seq 256 --steps 8)
hf=$(python3 "$here/anchor_train.py" "$config" --batch 16 --seq 256 --steps 8 2>/dev/null)
python3 - "$tfm" "$hf" <<'PY'
import json, sys
tfm, hf = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ratios = {"tokens_per_s_speedup": tfm["tokens_per_s"] / hf["tokens_per_s"],
          "peak_rss_ratio": tfm["peak_rss_mib"] / hf["peak_rss_mib"]}
print(json.dumps({"tfm": tfm, "transformers": hf, "ratios": ratios}, indent=2))
PY
