// simd.h's kernels for AVX2 with FMA, the ISA the whole build targets (x86-64-v3).
#define TFM_VECTOR_ISA avx2
#include "backends/cpu/vector_kernels_body.h"
