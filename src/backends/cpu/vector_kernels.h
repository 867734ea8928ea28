// The CPU kernels written against simd.h's vectors, compiled once for each x86 vector ISA tfm has
// a path for (vector_kernels_avx2.cc at the build's baseline, vector_kernels_avx512.cc under an
// AVX-512 target pragma: the same body) and chosen at run time from what the CPU has (cpu_isa()),
// never from the machine that built tfm. Callers in loops look the set up once.
#pragma once

#include <cstdint>
#include <vector>

namespace tfm::cpu {

// Rows of bf16 weights and where their products go.
struct Bf16Rows {
  const uint16_t* w;
  int64_t n;
  float* out;
};

struct VectorKernels {
  const char* isa;  // "AVX2+FMA", "AVX-512"
  // out[m, n] = x[m, k] . w[n, k]^T for a few rows of x (decode): the weights streamed once.
  void (*gemv_f32)(const float* x, const float* w, int64_t m, int64_t n, int64_t k, float* out);
  void (*gemv_bf16)(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, float* out);
  // gemv_bf16 of one row of x with each of `count` weights, in one pass of the threads: each
  // thread one run of rows across them.
  void (*gemv_bf16_one_row_each)(const float* x, const Bf16Rows* weights, int64_t count, int64_t k);
  // Attention over listed keys for one query of q_heads heads of `dim` with a cache of kv_heads
  // heads a row (the query heads that share a KV head are adjacent): key or value row j starts at
  // k + j * stride and holds the KV heads one after another. With group = q_heads / kv_heads,
  // scores[h * count + i] = scale * q[h] . k[keys[i], h / group]
  void (*key_scores_f32)(const float* q, int64_t q_heads, int64_t kv_heads, const float* k,
                         int64_t stride, const int32_t* keys, int64_t count, int64_t dim,
                         float scale, float* scores);
  void (*key_scores_bf16)(const float* q, int64_t q_heads, int64_t kv_heads, const uint16_t* k,
                          int64_t stride, const int32_t* keys, int64_t count, int64_t dim,
                          float scale, float* scores);
  // out[h] = sum over i of probs[h * count + i] v[keys[i], h / group]
  void (*weighted_values_f32)(const float* probs, int64_t q_heads, int64_t kv_heads, const float* v,
                              int64_t stride, const int32_t* keys, int64_t count, int64_t dim,
                              float* out);
  void (*weighted_values_bf16)(const float* probs, int64_t q_heads, int64_t kv_heads,
                               const uint16_t* v, int64_t stride, const int32_t* keys,
                               int64_t count, int64_t dim, float* out);
  // out[i] = exp(in[i] - shift) * scale; `in` may be `out`.
  void (*exp_shifted)(const float* in, float* out, int64_t n, float shift, float scale);
  void (*silu)(float* x, int64_t n);  // x = x sigmoid(x)
  // One query's attention weights from its scores (q . k, unscaled) over keys [0, keys): where
  // [begin, end) and row_mask keep key j, exp(scale scores[j] - the largest such), rounded to
  // bf16; 0 elsewhere. Returns 1 / the kept weights' sum (before rounding), or 0 where no key is
  // kept.
  float (*attention_weights_bf16)(const float* scores, const int32_t* row_mask, int64_t begin,
                                  int64_t end, int64_t keys, float scale, uint16_t* weights);
  void (*round_bf16)(const float* x, uint16_t* out, int64_t n);  // f32_to_bf16_bits of each
  void (*silu_grad)(float* x, const float* dy, int64_t n);       // x = dy d(x sigmoid(x))/dx
};

// The fastest set this CPU runs.
const VectorKernels& vector_kernels();
// The set whose GEMV of bf16 weights with m rows of x is fastest here: for one row the AVX2 build,
// which streamed the weights faster than the AVX-512 one on both AVX-512 CPUs measured (AMD's Zen
// 4, 9-35%; a Xeon with AMX, 1-10%: bench/RESULTS.md), else vector_kernels().
const VectorKernels& gemv_kernels(int64_t m);
// Every set this CPU runs, the fastest last (the tests run each against a scalar reference).
std::vector<const VectorKernels*> runnable_vector_kernels();

// gemv_bf16 on native bf16 dot products (AVX512_BF16: vector_kernels_avx512_bf16.cc), x rounded
// to bf16; null where the CPU has none.
using GemvBf16 = void (*)(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                          float* out);
GemvBf16 gemv_bf16_dot_products();
// Products of bf16 weights with many rows of f32 x on AVX-512's f32 FMAs, the weights widened in
// registers and x exact (widened_products_avx512.cc); null where the CPU has no AVX-512.
GemvBf16 widened_products();

// Products of bf16 weights on AMX tiles (vector_kernels_amx.cc) with bf16 x (f32 x goes through
// bf16_gemm.h's rounded_to_bf16 first). Null where the CPU has no AMX-BF16 or the OS did not grant
// its tiles.
struct TileProducts {
  void (*of_bf16)(const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                  float* out);
  // of_bf16 of one x with each of `count` weights (out [m, n] each): AMX's tiles take x packed
  // once and every weights' blocks in one pass of the threads.
  void (*of_bf16_each)(const uint16_t* x, const Bf16Rows* weights, int64_t count, int64_t m,
                       int64_t k);
};
const TileProducts* tile_products();
// The same products on AVX512_BF16's dot products (vector_kernels_avx512_bf16.cc); null where
// cpu_isa() chose no dot-product rows.
const TileProducts* dot_products();

}  // namespace tfm::cpu
