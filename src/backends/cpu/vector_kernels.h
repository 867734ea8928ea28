// The CPU kernels written against simd.h's vectors, compiled once for each x86 vector ISA tfm has
// a path for (vector_kernels_avx2.cc at the build's baseline, vector_kernels_avx512.cc under an
// AVX-512 target pragma: the same body) and chosen at run time from what the CPU has (cpu_isa()),
// never from the machine that built tfm. Callers in loops look the set up once.
#pragma once

#include <cstdint>
#include <vector>

namespace tfm::cpu {

struct VectorKernels {
  const char* isa;  // "AVX2+FMA", "AVX-512"
  // out[m, n] = x[m, k] . w[n, k]^T for a few rows of x (decode): the weights streamed once.
  void (*gemv_f32)(const float* x, const float* w, int64_t m, int64_t n, int64_t k, float* out);
  void (*gemv_bf16)(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, float* out);
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  float (*dot_bf16)(const float* a, const uint16_t* b, int64_t n);
  void (*axpy_f32)(float alpha, const float* x, float* y, int64_t n);  // y += alpha x
  void (*axpy_bf16)(float alpha, const uint16_t* x, float* y, int64_t n);
  // out[i] = exp(in[i] - shift) * scale; `in` may be `out`.
  void (*exp_shifted)(const float* in, float* out, int64_t n, float shift, float scale);
  void (*silu)(float* x, int64_t n);                        // x = x sigmoid(x)
  void (*round_bf16)(const float* x, uint16_t* out, int64_t n);  // f32_to_bf16_bits of each
  void (*silu_grad)(float* x, const float* dy, int64_t n);  // x = dy d(x sigmoid(x))/dx
};

// The fastest set this CPU runs.
const VectorKernels& vector_kernels();
// Every set this CPU runs, the fastest last (the tests run each against a scalar reference).
std::vector<const VectorKernels*> runnable_vector_kernels();

// gemv_bf16 on native bf16 dot products (AVX512_BF16: vector_kernels_avx512_bf16.cc), x rounded
// to bf16; null where the CPU has none.
using GemvBf16 = void (*)(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                          float* out);
GemvBf16 gemv_bf16_dot_products();

}  // namespace tfm::cpu
