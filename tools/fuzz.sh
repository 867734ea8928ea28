#!/usr/bin/env bash
# Fuzzes the safetensors header parser and the config.json reader, SECONDS (default 60) split
# between them, with libFuzzer + ASan/UBSan. Exits non-zero when a fuzzer finds a crash; the input
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
cmake --build "$build" -j"${JOBS:-2}" --target safetensors_header_fuzz config_json_fuzz

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
  -dict="$root/tests/fuzz/safetensors.dict" -max_total_time="$((seconds / 2))" -max_len=8192 \
  -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$build/fuzz-artifacts/"

# Seeds: the fixtures' config.json files.
configs="$build/fuzz-configs"
mkdir -p "$configs"
for file in "$root"/tests/data/fixtures/*/config.json; do
  cp "$file" "$configs/$(basename "$(dirname "$file")").json"
done
"$build/tests/fuzz/config_json_fuzz" "$configs" \
  -dict="$root/tests/fuzz/config.dict" -max_total_time="$((seconds - seconds / 2))" \
  -max_len=16384 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$build/fuzz-artifacts/"
