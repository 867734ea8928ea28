#!/usr/bin/env bash
# The PJRT backend through XLA's CPU plugin beside tfm's CPU backend, one run, Qwen3-0.6B shape
# (random bf16 weights from bench/qwen3-0.6b.json): each shape's compile time on a first run (empty
# compile cache) and on a second (cached), decode tokens/s and prefill ms. Prints JSON.
#   bench/pjrt_bench.sh [BUILD_DIR] [PLUGIN] [CONFIG_OR_MODEL]
# PLUGIN defaults to the one `make test` installs into .venv-test/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
plugin=${2:-$(ls "$here"/../.venv-test/lib/python3*/site-packages/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so)}
model=${3:-$here/qwen3-0.6b.json}
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
args=(--dtype bf16 --new-tokens 16 --prefill 128)
cpu=$("$build/bench/generate_bench" "$model" "${args[@]}" --device cpu)
first=$("$build/bench/generate_bench" "$model" "${args[@]}" --device pjrt --pjrt-plugin "$plugin" \
  --pjrt-cache "$cache" 2>/dev/null)
cached=$("$build/bench/generate_bench" "$model" "${args[@]}" --device pjrt --pjrt-plugin "$plugin" \
  --pjrt-cache "$cache" 2>/dev/null)
python3 - "$cpu" "$first" "$cached" <<'PY'
import json, sys
cpu, first, cached = (json.loads(a) for a in sys.argv[1:])
ratios = {
    "pjrt_decode_over_cpu": first["decode_tokens_per_s"] / cpu["decode_tokens_per_s"],
    "pjrt_prefill_128_over_cpu": cpu["prefill_ms"]["128"] / first["prefill_ms"]["128"],
}
for shape, ms in first["compile_ms_by_shape"].items():
    ratios[f"compile_{shape}_first_over_cached"] = ms / cached["compile_ms_by_shape"][shape]
print(json.dumps({"cpu": cpu, "pjrt_first_run": first, "pjrt_cached_run": cached,
                  "ratios": ratios}, indent=2))
PY
