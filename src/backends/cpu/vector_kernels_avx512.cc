// simd.h's kernels for AVX-512 (F, BW, VL), run only where cpu_isa() finds them. The ISA comes
// from a target pragma around this file's own code, not from file-wide flags: what it takes from
// headers included before the pragma (the standard library's inline functions and templates)
// stays baseline code, which the linker may share with the rest of tfm; an AVX-512 copy of one
// would run on AVX2-only machines too.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_intrinsics.h"
#include "backends/cpu/vector_kernels.h"
#include "tfm/dtype.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")
#define TFM_SIMD_AVX512 1
#define TFM_VECTOR_ISA avx512
#include "backends/cpu/vector_kernels_body.h"
#pragma GCC pop_options
