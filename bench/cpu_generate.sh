#!/usr/bin/env bash
# tfm vs transformers on CPU, same checkpoint, same prompts, one run; prints both and the ratios.
#   bench/cpu_generate.sh [BUILD_DIR] [MODEL_DIR]
# Makes a Qwen3-0.6B-shaped checkpoint with random bf16 weights when MODEL_DIR does not exist
# (needs pip install torch transformers safetensors).
set -euo pipefail
build=${1:-build}
model=${2:-/tmp/qwen3-0.6b}
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$model/model.safetensors" ] || python3 "$here/../tools/make_random_checkpoint.py" --out "$model" >/dev/null
tfm=$("$build/bench/generate_bench" "$model" --dtype bf16 --new-tokens 32 --prefill 128,1024)
hf=$(python3 "$here/anchor_transformers.py" "$model" --new-tokens 32 --prefill 128,1024 2>/dev/null)
python3 - "$tfm" "$hf" <<'PY'
import json, sys
tfm, hf = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ratios = {
    "decode_speedup": tfm["decode_tokens_per_s"] / hf["decode_tokens_per_s"],
    "decode_fraction_of_bandwidth_bound": tfm["decode_fraction_of_bound"],
}
for k in tfm["prefill_ms"]:
    ratios[f"prefill_{k}_speedup"] = hf["prefill_ms"][k] / tfm["prefill_ms"][k]
ratios["first_call_speedup"] = hf["first_call_s"] * 1e3 / tfm["first_call_ms"]
print(json.dumps({"tfm": tfm, "transformers": hf, "ratios": ratios}, indent=2))
PY
