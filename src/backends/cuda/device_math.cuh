// Device helpers shared by the kernels: element widening, warp and block reductions.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
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

// x[0..7] (activations or norm weights, small and reused) as two float4 through L1. Plain loads,
// not the read-only path: the activations were written by the kernel before, which may still
// have been running when this one started (overlapped_launch.h).
__device__ __forceinline__ void load8_cached(const float* x, float (&out)[8]) {
  const float4 a = reinterpret_cast<const float4*>(x)[0], b = reinterpret_cast<const float4*>(x)[1];
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
  out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

// Asks for the L1 line holding p, with no register waiting for it. ptxas issues a load next to
// its first use when it saves registers, even where the source loads several values before
// using any, so a walk of several steps takes a round trip to L2 each; prefetches of every
// step's lines first have those round trips overlap, and the loads find L1.
__device__ __forceinline__ void prefetch_l1([[maybe_unused]] const void* p) {
#if defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#endif
}

// The first call of a kernel started by launch_overlapped (overlapped_launch.h): lets the
// stream's next overlapped kernel be scheduled in turn. Without that launch, or before sm_90, it
// does nothing.
__device__ __forceinline__ void let_next_kernels_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Waits until every earlier kernel of the stream has finished and its writes are visible: a
// kernel started by launch_overlapped calls it before it reads what those kernels write.
__device__ __forceinline__ void wait_for_previous_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// A kernel's calls around its first reads of what no kernel of the step may write (a product's
// constant weights, fused decode attention's keys: overlapped_launch.h): with `early` the reads go
// out before the wait, so that they overlap the kernel before; otherwise after it.
__device__ __forceinline__ void before_early_reads(bool early) {
  let_next_kernels_start();
  if (!early) wait_for_previous_kernels();
}
__device__ __forceinline__ void after_early_reads(bool early) {
  if (early) wait_for_previous_kernels();
}

// Both, for a kernel with nothing to read before its wait.
__device__ __forceinline__ void await_previous_kernels() {
  let_next_kernels_start();
  wait_for_previous_kernels();
}

// The first key a query at cache slot `slot` sees under a sliding window (0: none, every key from
// the first): keys j with slot - j < window.
__device__ __forceinline__ int64_t first_visible_key(int64_t slot, int64_t window) {
  return window > 0 ? max(int64_t{0}, slot - window + 1) : 0;
}

// Elements of x before its first 16-byte boundary (at most n).
__device__ __forceinline__ int64_t before_boundary(const float* x, int64_t n) {
  const auto misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(x) / sizeof(float) % 4);
  return min(n, (4 - misaligned) % 4);
}

__device__ __forceinline__ float silu(float v) { return v / (1.f + expf(-v)); }

struct Sum {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// A butterfly: every lane ends with the same value, so lanes agree bit for bit.
template <typename T, typename Combine>
__device__ __forceinline__ T warp_reduce(T x, Combine combine) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    x = combine(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
  return warp_reduce(x, Sum{});
}

// Over a whole block (blockDim.x a multiple of 32); every thread gets the result. The order is
// fixed by the block size, so reruns give the same bits. Starts with a barrier, so back-to-back
// calls may share the staging array.
template <typename T, typename Combine>
__device__ __forceinline__ T block_reduce(T x, Combine combine) {
  __shared__ T per_warp[32];
  x = warp_reduce(x, combine);
  __syncthreads();
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = x;
  __syncthreads();
  x = per_warp[0];
  for (unsigned w = 1; w < blockDim.x / 32; ++w) x = combine(x, per_warp[w]);
  return x;
}

// Declares `name`, the block's dynamic shared memory (the launch's third parameter). A macro so
// that tests/cuda_emulation can hand each emulated block its own.
#ifndef TFM_DYNAMIC_SHARED_MEMORY
#define TFM_DYNAMIC_SHARED_MEMORY(name) extern __shared__ __align__(128) unsigned char name[]
#endif

inline int blocks_for(int64_t count, int threads) {
  return static_cast<int>((count + threads - 1) / threads);
}

// Bytes rounded up to 256, the alignment of each buffer a launcher carves out of its scratch.
inline size_t scratch_aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// How many warps share each of a decode product's `outputs` (columns, or tiles of them), each a
// slice of k, a power of two up to max_warps: more for products with few outputs, until about
// 4096 warps (half of what an H200's 132 multiprocessors hold at once) stream the weights, while
// every slice keeps at least min_slice of k.
inline int warps_per_output(int64_t outputs, int64_t k, int64_t min_slice, int max_warps) {
  constexpr int64_t kWantedWarps = 4096;
  int warps = 1;
  while (warps < max_warps && outputs * warps < kWantedWarps && k >= min_slice * warps * 2) {
    warps *= 2;
  }
  return warps;
}

}  // namespace tfm::cuda
