#include "backends/cpu/cpu_isa.h"

#include <cpuid.h>
#include <dnnl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "backends/cpu/multiply_add_chains.h"
#include "backends/cpu/vector_kernels.h"

namespace tfm::cpu {
namespace {

struct Registers {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Registers cpuid(unsigned leaf, unsigned subleaf) {
  Registers r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) return {};
  return r;
}

bool bit(unsigned value, int n) { return ((value >> n) & 1u) != 0; }

// The register state the OS saves on a context switch (XCR0): an ISA whose registers it does not
// save cannot be used, whatever cpuid says.
uint64_t saved_state() {
  if (!bit(cpuid(1, 0).ecx, 27)) return 0;  // no OSXSAVE: no XGETBV
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

// Linux hands a process AMX's tile data only when it asks (arch_prctl ARCH_REQ_XCOMP_PERM): a
// kernel that does not grant it leaves the tiles unusable whatever cpuid says.
bool tile_data_granted() {
  constexpr int kRequestPermission = 0x1023, kTileData = 18;
  return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
}

std::string onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    default:
      return "isa " + std::to_string(static_cast<int>(isa));
  }
}

// The shortest of 5 runs of 20000 rounds of `chains` on this thread, in seconds.
double shortest_run(float (*chains)(long steps)) {
  double best = 1e9;
  for (int run = 0; run < 5; ++run) {
    const auto start = std::chrono::steady_clock::now();
    const float sink = chains(20'000);
    __asm__ volatile("" : : "m"(sink));
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// Whether vdpbf16ps does under 1.4 times the flops of AVX-512's f32 FMAs here (64 to their 32 an
// instruction), timed rather than looked up by model: on a Xeon without AMX it ran at half their
// instruction rate (172 against 350 GFLOP/s on 2 cores), where on an AMD EPYC (Zen 4) it reached
// 435-471 (gemv_bench's peaks). About a millisecond, once.
bool f32_outruns_bf16_dots() {
  const double dots = 64.0 / shortest_run(avx512::bf16_dot_chains),
               fmas = 32.0 / shortest_run(avx512::f32_fma_chains);
  return dots < 1.4 * fmas;
}

CpuIsa read_isa() {
  const Registers basic = cpuid(1, 0), extended = cpuid(7, 0), extended1 = cpuid(7, 1);
  const uint64_t state = saved_state();
  const bool ymm = (state & 0x6) == 0x6, zmm = (state & 0xe6) == 0xe6,
             tiles = (state & 0x60000) == 0x60000;
  CpuIsa isa;
  isa.avx2_fma = ymm && bit(extended.ebx, 5) && bit(basic.ecx, 12);
  isa.avx512 = zmm && bit(extended.ebx, 16) && bit(extended.ebx, 30) && bit(extended.ebx, 31);
  isa.avx512_bf16 = isa.avx512 && bit(extended1.eax, 5);
  isa.amx_bf16 =
      isa.avx512 && tiles && bit(extended.edx, 22) && bit(extended.edx, 24) && tile_data_granted();
  const dnnl_cpu_isa_t onednn = dnnl_get_effective_cpu_isa();
  isa.onednn = onednn_isa_name(onednn);
  // The ISA values are supersets by bit: avx512_core_bf16's bits are in AMX's too.
  isa.bf16_products = (onednn & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
  isa.widened_products =
      isa.avx512 && !isa.amx_bf16 && (!isa.avx512_bf16 || f32_outruns_bf16_dots());
  // Up to where tfm's kernels beat oneDNN's bf16 matmul (cpu_isa.h).
  if (isa.bf16_products && isa.avx512_bf16 && !isa.widened_products) {
    isa.dot_product_rows = isa.amx_bf16 ? 256 : 128;
  }
  return isa;
}

}  // namespace

const CpuIsa& cpu_isa() {
  static const CpuIsa isa = read_isa();
  return isa;
}

std::string describe(const CpuIsa& isa) {
  std::string text;
  for (const auto& [has, name] : {std::pair{isa.avx2_fma, "AVX2+FMA"},
                                  {isa.avx512, "AVX-512"},
                                  {isa.avx512_bf16, "AVX512_BF16"},
                                  {isa.amx_bf16, "AMX-BF16"}}) {
    if (has) text += std::string(text.empty() ? "" : " ") + name;
  }
  return (text.empty() ? "no AVX2" : text) + " (oneDNN: " + isa.onednn + ")";
}

std::vector<std::pair<std::string, std::string>> product_paths(const CpuIsa& isa) {
  const std::string vectors =
      std::string("tfm's kernels, ") + (isa.avx512 ? "AVX-512" : "AVX2+FMA");
  if (isa.widened_products) {
    return {{"isa", describe(isa)},
            {"products of bf16 weights, any number of rows",
             "tfm's kernels, weights widened to f32 in registers (AVX-512 FMAs, x exact)"},
            {"products of f32 weights, over 8 rows", "oneDNN sgemm"},
            {"attention of 16 or more queries over a bf16 KV cache",
             "keys and values widened to f32 for oneDNN's sgemm"},
            {"products of up to 8 rows of f32 weights, attention, softmax, SiLU",
             vectors + " (chosen at run time)"}};
  }
  const std::string few = std::to_string(std::max<int64_t>(8, isa.dot_product_rows));
  const std::string packed_attention =
      " over keys and values packed once a call (q and weights rounded to bf16, f32 accumulation)";
  return {
      {"isa", describe(isa)},
      {"products of bf16 weights, over " + few + " rows",
       isa.bf16_products ? "bf16 dot products (oneDNN bf16 matmul, f32 accumulation)"
                         : "weights widened to f32 for oneDNN's sgemm"},
      {"products of f32 weights, over 8 rows", "oneDNN sgemm"},
      {"products of bf16 weights, 5 to " + few + " rows",
       isa.amx_bf16 ? "tfm's kernels, AMX tiles (f32 accumulation)"
       : isa.dot_product_rows > 0
           ? "tfm's kernels, bf16 dot products (AVX512_BF16, f32 accumulation)"
           : "tfm's kernels, weights widened to f32 in registers"},
      {"attention of 16 or more queries over a bf16 KV cache",
       isa.amx_bf16               ? "tfm's kernels, AMX tiles" + packed_attention
       : isa.dot_product_rows > 0 ? "tfm's kernels, bf16 dot products" + packed_attention
                                  : "keys and values widened to f32 for oneDNN's sgemm"},
      {std::string("products of up to ") +
           (isa.dot_product_rows > 0 ? "4 rows of bf16 weights (8 of f32)" : "8 rows") +
           ", attention, softmax, SiLU",
       vectors + (isa.avx512 ? ", one row of x by bf16 weights AVX2+FMA (it streams faster)" : "") +
           " (chosen at run time)"}};
}

}  // namespace tfm::cpu
