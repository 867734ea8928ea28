// Matrix products of bf16 operands accumulated in f32, by oneDNN's matmul primitive: native bf16
// dot products where the CPU has them (cpu_isa().bf16_products; its kernels are chosen by oneDNN
// at run time, AVX512_BF16 or AMX). Operands are given by element strides, so a transposed
// operand is read where it lies.
#pragma once

#include <cstdint>

namespace tfm::cpu {

// A bf16 matrix: element (i, j) at data[i * row + j * col].
struct Bf16Matrix {
  const uint16_t* data;
  int64_t row, col;
};

// c[m, n] (f32, row stride ldc) = a[m, k] b[k, n], added to c when `accumulate`. `op` names the
// caller in the error.
void bf16_gemm(int64_t m, int64_t n, int64_t k, Bf16Matrix a, Bf16Matrix b, float* c, int64_t ldc,
               bool accumulate, const char* op);

// c[m, n] (bf16, row stride ldc) = a[m, k] b[k, n] accumulated in f32 and rounded once to
// nearest even, as torch's bf16 products write their output: no f32 copy of c is made.
void bf16_gemm_rounded(int64_t m, int64_t n, int64_t k, Bf16Matrix a, Bf16Matrix b, uint16_t* c,
                       int64_t ldc, const char* op);

// x [count] f32 rounded to bf16 (to nearest even, as torch casts) into `out`, in parallel.
void round_to_bf16(const float* x, int64_t count, uint16_t* out);

// x [count] rounded as round_to_bf16 does, into a buffer of the calling thread's that holds it
// until that thread's next call: for products that take f32 x to bf16 operands.
const uint16_t* rounded_to_bf16(const float* x, int64_t count);

}  // namespace tfm::cpu
