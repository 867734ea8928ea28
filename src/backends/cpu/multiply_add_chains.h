// Independent chains of multiply-adds on registers, nothing read from memory: what cpu_isa() times
// to choose a path, and what the benchmarks' arithmetic peaks run. Each runs `steps` rounds of
// kChains instructions on the calling thread and returns their sum (use it, so that they are
// computed). AVX-512 code: call only where cpu_isa() finds the ISA named.
#pragma once

namespace tfm::cpu::avx512 {

// Independent chains each runs: enough to hide a multiply-add's latency on every x86 core.
inline constexpr int kChains = 12;

// vdpbf16ps on 512-bit registers (AVX512_BF16): 32 bf16 products and 32 adds each.
float bf16_dot_chains(long steps);
// vfmadd on 512-bit registers: 16 f32 products and 16 adds each.
float f32_fma_chains(long steps);

}  // namespace tfm::cpu::avx512
