// Device helpers shared by the kernels: element widening and warp reductions.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace tfm::cuda {

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T narrow(float x);
template <>
__device__ __forceinline__ float narrow<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

inline int blocks_for(int64_t count, int threads) {
  return static_cast<int>((count + threads - 1) / threads);
}

}  // namespace tfm::cuda
