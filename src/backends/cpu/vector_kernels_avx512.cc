// simd.h's kernels for AVX-512 (F, BW, VL, DQ): this file alone is compiled with those flags
// (CMakeLists.txt), and runs only where cpu_isa() finds them.
#define TFM_VECTOR_ISA avx512
#include "backends/cpu/vector_kernels_body.h"
