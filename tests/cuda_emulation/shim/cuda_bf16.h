// bf16 for the CPU emulation of CUDA kernels (see cuda_runtime.h here), through the project's
// own conversions: rounding to nearest even, as __float2bfloat16_rn does.
#pragma once

#include <cstdint>

#include "cuda_runtime.h"
#include "tfm/dtype.h"

struct __nv_bfloat16 {
  uint16_t bits;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {tfm::f32_to_bf16_bits(f)}; }
inline float __bfloat162float(__nv_bfloat16 b) { return tfm::bf16_bits_to_f32(b.bits); }
inline float2 __bfloat1622float2(__nv_bfloat162 pair) {
  return {__bfloat162float(pair.x), __bfloat162float(pair.y)};
}
