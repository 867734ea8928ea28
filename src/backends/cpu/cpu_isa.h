// What this CPU computes with, read once when first asked (cpuid, and the ISA oneDNN's kernels
// dispatch to on it), and which path each kind of matrix product takes here: chosen at run time
// from what the CPU has, never from the machine tfm was built on.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tfm::cpu {

struct CpuIsa {
  bool avx2_fma = false;
  bool avx512 = false;       // AVX-512 F, BW, VL
  bool avx512_bf16 = false;  // vdpbf16ps: bf16 pairs multiplied and summed into f32
  bool amx_bf16 = false;     // AMX tiles of bf16
  std::string onednn;        // the ISA oneDNN's kernels use here ("avx512_core_bf16", ...)
  // Products of bf16 weights with many rows (prefill, training) as bf16 dot products accumulated
  // in f32 (oneDNN's bf16 matmul), where oneDNN's kernels have native bf16 instructions here:
  // faster than widening the weights to f32 for its sgemm. Elsewhere they are widened.
  bool bf16_products = false;
  // Products of bf16 weights with any number of rows of f32 x on AVX-512's f32 FMAs, the weights
  // widened in registers and x exact (widened_products_avx512.cc): where the CPU has AVX-512 and
  // no AMX, and its vdpbf16ps, if any, does not clearly outrun the FMAs (timed once at start). On
  // a Xeon without AMX (2 cores) they ran at 350 GFLOP/s against vdpbf16ps' 172, and Qwen3-0.6B's
  // products of 128 rows took 720 ms against 949 on vdpbf16ps and 822 with oneDNN's sgemm fed
  // widened weights (gemv_bench). Where it is set, it is the path (big_products_path()) whatever
  // bf16_products says, and dot_product_rows is 0.
  bool widened_products = false;
  // Products of bf16 weights with 5 to this many rows of x (serving batches, prefill chunks) take
  // tfm's own kernel (0: none): AMX tiles where the CPU has AMX-BF16 (vector_kernels_amx.cc), else
  // AVX512_BF16's dot products (vector_kernels_avx512_bf16.cc). Both read the weights where they
  // lie, where oneDNN's matmul copies them into its own layout on every call. On an AMD EPYC with
  // AVX512_BF16, Qwen3-0.6B's products took 60-65 ms against oneDNN's 94 at 16 rows, 115-117
  // against 143-175 at 32, 263 against 281 at 64, and as long at 128 (gemv_bench); with unmasked
  // loads, 96 against 132-163 at 32 and 362-364 against 382-389 at 128, but 844 against 769 at
  // 256, where x no longer stays in L2. On a Xeon with AMX (2 cores), the tiles took 74-78 ms
  // against oneDNN's AMX kernels' 84-134 at 32 rows and 118-163 against 108 at 64; once their
  // buffers sat on cache lines, 83-93 against 87-153 at 64, 106-128 against 119-124 at 128 and
  // 193-232 against 219-450 at 256, and a 128-token prefill (two chunks of 64) 255-351 ms against
  // 238-357 with oneDNN's (medians 285, 346).
  int64_t dot_product_rows = 0;
};

const CpuIsa& cpu_isa();
// "AVX2+FMA AVX-512 AVX512_BF16 (oneDNN: avx512_core_bf16)".
std::string describe(const CpuIsa& isa);
// The ISA and the path each kind of product takes, as `tfm devices` lists them.
std::vector<std::pair<std::string, std::string>> product_paths(const CpuIsa& isa);

}  // namespace tfm::cpu
