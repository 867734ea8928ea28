#!/usr/bin/env bash
# Fuzzes the safetensors header parser, the config.json reader and the tokenizer.json loader,
# SECONDS (default 60) split between them, with libFuzzer + ASan/UBSan. Exits non-zero when a fuzzer finds a crash; the input
# that caused it is left in build-fuzz/fuzz-artifacts/. Usage: tools/fuzz.sh [SECONDS]
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"

fuzzer_runtime() {
  ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1
}
if ! command -v clang++ >/dev/null || ! fuzzer_runtime; then
  sudo_if_needed=""
  [ "$(id -u)" -eq 0 ] || sudo_if_needed="sudo"
  $sudo_if_needed apt-get update -qq
  $sudo_if_needed apt-get install -y -qq clang libclang-rt-14-dev
fi

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DTFM_FUZZ=ON -DTFM_SANITIZE=ON \
  -DTFM_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"${JOBS:-2}" --target safetensors_header_fuzz config_json_fuzz \
  tokenizer_json_fuzz
share=$((seconds / 3))

# Seeds: the fixtures' headers (a file cut after its header, so offsets point past the end) and a
# small complete file, so mutations start from both the error paths and the accepting path.
corpus="$build/fuzz-corpus"
mkdir -p "$corpus" "$build/fuzz-artifacts"
for file in "$root"/tests/data/fixtures/*/model.safetensors; do
  length=$(od -An -t u8 -N8 "$file" | tr -d ' ')
  head -c "$((8 + length))" "$file" >"$corpus/$(basename "$(dirname "$file")")-header"
done
small='{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}}  '
printf "\\x$(printf %02x ${#small})\\x00\\x00\\x00\\x00\\x00\\x00\\x00%s" "$small" >"$corpus/small"
head -c 12 /dev/zero >>"$corpus/small"

"$build/tests/fuzz/safetensors_header_fuzz" "$corpus" \
  -dict="$root/tests/fuzz/safetensors.dict" -max_total_time="$share" -max_len=8192 \
  -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$build/fuzz-artifacts/"

# Seeds: the fixtures' config.json files.
configs="$build/fuzz-configs"
mkdir -p "$configs"
for file in "$root"/tests/data/fixtures/*/config.json; do
  cp "$file" "$configs/$(basename "$(dirname "$file")").json"
done
"$build/tests/fuzz/config_json_fuzz" "$configs" \
  -dict="$root/tests/fuzz/config.dict" -max_total_time="$share" \
  -max_len=16384 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$build/fuzz-artifacts/"

# Seeds: each test tokenizer cut to its first 60 tokens and the merges among them (whole files
# are ~100 KB, beyond what mutation explores), its normalizer, pre-tokenizer, post-processor,
# decoder and added tokens kept.
tokenizers="$build/fuzz-tokenizers"
mkdir -p "$tokenizers"
for file in "$root"/tests/data/tokenizers/*/tokenizer.json; do
  python3 - "$file" "$tokenizers/$(basename "$(dirname "$file")").json" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
model = spec["model"]
if isinstance(model.get("vocab"), dict):
    model["vocab"] = dict(sorted(model["vocab"].items(), key=lambda kv: kv[1])[:60])
    merges = []
    for m in model.get("merges", []):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in model["vocab"] and b in model["vocab"] and a + b in model["vocab"]:
            merges.append(m)
    model["merges"] = merges
elif isinstance(model.get("vocab"), list):
    model["vocab"] = model["vocab"][:60]
json.dump(spec, open(sys.argv[2], "w"), separators=(",", ":"))
PY
done
"$build/tests/fuzz/tokenizer_json_fuzz" "$tokenizers" \
  -dict="$root/tests/fuzz/tokenizer.dict" -max_total_time="$((seconds - 2 * share))" \
  -max_len=16384 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$build/fuzz-artifacts/"
