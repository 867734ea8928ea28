// The x86 vector intrinsics, for simd.h and for the file that must include them before its target
// pragma (vector_kernels_avx512.cc, vector_kernels_avx512_bf16.cc, vector_kernels_amx.cc,
// widened_products_avx512.cc).
#pragma once

// GCC 12's AVX-512 intrinsics seed their "undefined" operands from themselves (`__Y = __Y`), which
// -Wuninitialized reports wherever they are inlined (GCC bug 105593): silenced for their text only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
