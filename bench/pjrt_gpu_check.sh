#!/usr/bin/env bash
# On the H200 machine, after bench/cuda_check.sh (same OUTDIR, same build, which has the PJRT
# backend when DEBS_DIR holds pjrt/pjrt_c_api.h): the PJRT backend through the XLA GPU plugin that
# the machine's JAX ships (jax_plugins/xla_cuda13). Lists the plugin's devices and attributes,
# checks greedy ids on the qwen3 fixture against transformers' (reference.json), and times the
# Qwen3-0.6B-shaped checkpoint twice with one compile cache (the second run compiles nothing)
# beside the CUDA backend's figures in tfm.json. Appends to stages.log; JSON into pjrt.json.
#   bench/pjrt_gpu_check.sh OUTDIR
set -uo pipefail
out=$(cd "$1" && pwd)
build=build-h200
model=/tmp/qwen3-0.6b
# The libraries cuda_check.sh unpacked (bench/cuda_env.sh) and the python3 that has JAX.
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:/tmp/deps/usr/lib:${LD_LIBRARY_PATH:-}
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
echo "== pjrt-gpu $(date +%T)" >> "$out/stages.log"
plugin=$(python3 -c 'import importlib.util as u
print(u.find_spec("jax_plugins.xla_cuda13").submodule_search_locations[0] + "/xla_cuda_plugin.so")')
echo "pjrt plugin: $plugin" >> "$out/stages.log"
[ -x "$build/tfm" ] && [ -f "$plugin" ] || { echo "pjrt-gpu: no tfm or no plugin" >> "$out/stages.log"; exit 1; }
cache=$(mktemp -d)
timeout 60 "$build/tfm" devices --pjrt-plugin "$plugin" --pjrt-cache "$cache" >> "$out/stages.log" 2>&1
echo "pjrt devices exit $?" >> "$out/stages.log"

fixture=tests/data/fixtures/qwen3
ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$fixture/reference.json'))['padded_input_ids'][0])))")
timeout 120 "$build/tfm" generate "$fixture" --ids "$ids" --print-ids --max-new-tokens 16 \
  --device pjrt --pjrt-plugin "$plugin" --pjrt-cache "$cache" > "$out/pjrt_ids.txt" 2>> "$out/stages.log"
echo "pjrt generate exit $?" >> "$out/stages.log"
python3 - "$fixture/reference.json" "$out/pjrt_ids.txt" >> "$out/stages.log" 2>&1 <<'PY'
import json, sys
want = json.load(open(sys.argv[1]))["greedy_16"][0]
got = json.loads(open(sys.argv[2]).read())
print("pjrt greedy ids equal transformers':", got == want, got)
PY
rm -f "$out/pjrt_ids.txt"

args=(--dtype bf16 --new-tokens 64 --prefill 128,1024 --batches 1,16 --device pjrt
  --pjrt-plugin "$plugin" --pjrt-cache "$cache")
first=$(timeout 150 "$build/bench/generate_bench" "$model" "${args[@]}" 2>> "$out/stages.log")
echo "pjrt bench, empty cache, exit $?" >> "$out/stages.log"
cached=$(timeout 100 "$build/bench/generate_bench" "$model" "${args[@]}" 2>> "$out/stages.log")
echo "pjrt bench, cached, exit $?" >> "$out/stages.log"
echo "{\"pjrt_first_run\": ${first:-null}, \"pjrt_cached_run\": ${cached:-null}}" > "$out/pjrt.json"
rm -rf "$cache"
echo "== pjrt-gpu done $(date +%T)" >> "$out/stages.log"
