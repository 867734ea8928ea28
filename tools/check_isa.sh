#!/usr/bin/env bash
# Fails when a binary holds AVX-512 instructions (zmm registers, embedded broadcasts) outside the
# kernels built for AVX-512 (namespaces tfm::cpu::avx512, avx512_bf16, avx512_widened and amx,
# simd.h's avx512 inline namespace): tfm must start and run on CPUs with AVX2 alone.
# Usage: tools/check_isa.sh BINARY
set -euo pipefail
binary="$1"
found=$(objdump -d --no-show-raw-insn -C "$binary" |
  awk '/^[0-9a-f]+ <.*>:$/ {fn = $0} /zmm|\{1to/ {print fn}' | grep -vE "(avx512(_bf16|_widened)?|amx)::" | sort -u || true)
if [ -n "$found" ]; then
  echo "AVX-512 instructions outside the AVX-512 kernels of $binary:"
  echo "$found" | head -20
  exit 1
fi
echo "$binary: AVX-512 instructions only in the AVX-512 kernels"
