#!/usr/bin/env bash
# tfm vs transformers, and llama.cpp when given its folder, on CPU: the same checkpoint, the same
# prompt lengths, one run; prints each one's figures, the ratios, and the CPU's ISA.
#   bench/cpu_generate.sh [--llama-cpp LLAMA_CPP_DIR] [--shape SHAPE] [BUILD_DIR] [MODEL_DIR]
# Makes MODEL_DIR when it does not exist: random bf16 weights shaped like Qwen3-0.6B, or SHAPE
# (tools/make_random_checkpoint.py --shape; qwen3-30b-a3b-4layers: a mixture of experts, whose
# decode bound counts the routed experts only; needs pip install torch transformers
# safetensors). With
# --llama-cpp, a Llama of that shape (llama.cpp snapshots older than Qwen3 convert it) and its bf16
# GGUF (LLAMA_CPP_DIR/convert_hf_to_gguf.py; needs pip install LLAMA_CPP_DIR/gguf-py), timed by
# LLAMA_CPP_DIR/build/bin/llama-bench. llama.cpp is built beside tfm, never inside it:
#   cmake -S DIR -B DIR/build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF && cmake --build DIR/build --target llama-bench
set -euo pipefail
llama_cpp=""
shape=qwen3-0.6b
if [ "${1:-}" = "--llama-cpp" ]; then
  llama_cpp=$(cd "$2" && pwd)
  shift 2
fi
if [ "${1:-}" = "--shape" ]; then
  shape=$2
  shift 2
fi
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
architecture=qwen3
[ -n "$llama_cpp" ] && architecture=llama
model=${2:-/tmp/$architecture-$shape}
[ -f "$model/config.json" ] || python3 "$here/../tools/make_random_checkpoint.py" \
  --shape "$shape" --architecture "$architecture" --out "$model" >/dev/null
tfm=$("$build/bench/generate_bench" "$model" --dtype bf16 --new-tokens 32 --prefill 128,1024)
hf=$(python3 "$here/anchor_transformers.py" "$model" --new-tokens 32 --prefill 128,1024 2>/dev/null)
llama="{}"
if [ -n "$llama_cpp" ]; then
  gguf=$model/model-bf16.gguf
  [ -f "$gguf" ] || python3 "$llama_cpp/convert_hf_to_gguf.py" "$model" --outtype bf16 \
    --outfile "$gguf" >/dev/null 2>&1
  llama=$("$llama_cpp/build/bin/llama-bench" -m "$gguf" -p 128,1024 -n 32 -t "$(nproc)" -o json \
    2>/dev/null)
fi
. "$here/cpu_identity.sh"
python3 - "$tfm" "$hf" "$llama" "$cpu" "$isa" <<'PY'
import json, sys
tfm, hf, llama = (json.loads(a) for a in sys.argv[1:4])
ratios = {
    "decode_speedup": tfm["decode_tokens_per_s"] / hf["decode_tokens_per_s"],
    "decode_fraction_of_bandwidth_bound": tfm["decode_fraction_of_bound"],
}
for k in tfm["prefill_ms"]:
    ratios[f"prefill_{k}_speedup"] = hf["prefill_ms"][k] / tfm["prefill_ms"][k]
ratios["first_call_speedup"] = hf["first_call_s"] * 1e3 / tfm["first_call_ms"]
out = {"cpu": sys.argv[4], "isa": sys.argv[5].strip(),
       "read_bandwidth_gbs": tfm.get("bandwidth_gbs"), "tfm": tfm, "transformers": hf}
if llama:
    # llama-bench: one entry per test, n_prompt tokens of prefill or n_gen tokens of decode.
    by_test = {(t["n_prompt"], t["n_gen"]): t["avg_ts"] for t in llama}
    figures = {"prefill_ms": {str(p): p / ts * 1e3 for (p, g), ts in by_test.items() if g == 0},
               "decode_tokens_per_s": next(ts for (p, g), ts in by_test.items() if p == 0),
               "build": llama[0].get("build_commit")}
    out["llama_cpp"] = figures
    ratios["decode_speedup_over_llama_cpp"] = (tfm["decode_tokens_per_s"] /
                                               figures["decode_tokens_per_s"])
    for k, ms in figures["prefill_ms"].items():
        if k in tfm["prefill_ms"]:
            ratios[f"prefill_{k}_speedup_over_llama_cpp"] = ms / tfm["prefill_ms"][k]
out["ratios"] = ratios
print(json.dumps(out, indent=2))
PY
