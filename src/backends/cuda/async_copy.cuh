// Copies from global into shared memory that the thread does not wait for (cp.async, sm_80 on):
// a block stages the next tile while its warps compute on this one. A thread's copies form a
// group at commit_copies(); wait_copies<n>() returns once all but its n newest groups have
// landed, visible to the thread itself (a __syncthreads() after makes them the block's).
// tests/cuda_emulation defines TFM_EMULATED_ASYNC_COPY and these with the same semantics.
#pragma once

#include <cstdint>

namespace tfm::cuda {

#ifndef TFM_EMULATED_ASYNC_COPY
// kBytes (4, 8 or 16, the alignment of both addresses) from src to shared_dst, or zeros without
// reading src where !present.
template <int kBytes>
__device__ __forceinline__ void copy_async(void* shared_dst, const void* src, bool present) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16);
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  const size_t global_src = __cvta_generic_to_global(src);
  const int src_bytes = present ? kBytes : 0;
  if constexpr (kBytes == 16) {
    // .cg: the tile is read once by this block, so it skips L1.
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src),
                 "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(global_src),
                 "n"(kBytes), "r"(src_bytes)
                 : "memory");
  }
}

__device__ __forceinline__ void commit_copies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
#endif

}  // namespace tfm::cuda
