// Attention computed over chunks of a row's keys by separate blocks, and merged: each chunk
// leaves its softmax statistics and unnormalized output, and the row's last block to finish
// combines them (split-K decode, attention.cu; flash prefill over key splits, flash_attention.cu).
#pragma once

#include <cstdint>

#include "backends/cuda/device_math.cuh"

namespace tfm::cuda {
namespace {

// A partial result: [max score, sum of exp, unnormalized output (head_dim)].
__device__ __forceinline__ float* partial_at(float* partials, int64_t row, int64_t split,
                                             int64_t splits, int head_dim) {
  return partials + (row * splits + split) * (head_dim + 2);
}

// Merges a row's chunks into its output, one warp: lane i reads chunk i's max and sum (and every
// 32nd after it), so the loads go out together. A query that sees no key gets zeros, as on the CPU.
// Only chunks that saw no key (sum 0) are skipped: a NaN sum is kept, so a NaN score reaches the
// output as it does on the CPU instead of silently dropping its chunk. The chunks were written by
// other blocks of this launch: they are read as volatile, from L2, past this SM's L1.
template <int E, typename Out>
__device__ void merge_chunks(const volatile float* first, int64_t splits, int head_dim, Out* out,
                             int lane) {
  const auto chunk = [&](int64_t sp) { return first + sp * (head_dim + 2); };
  float m = -INFINITY;
  for (int64_t sp = lane; sp < splits; sp += 32) {
    if (chunk(sp)[1] != 0.f) m = fmaxf(m, chunk(sp)[0]);
  }
  m = warp_reduce(m, Max{});
  float denom = 0.f;
  for (int64_t sp = lane; sp < splits; sp += 32) {
    const float l = chunk(sp)[1];
    if (l != 0.f) denom += l * expf(chunk(sp)[0] - m);
  }
  denom = warp_sum(denom);
  const float inv = denom != 0.f ? 1.f / denom : 0.f;
  float acc[E] = {};
  for (int64_t base = 0; base < splits; base += 32) {
    const int64_t mine = base + lane;
    float weight = 0.f;
    if (mine < splits && chunk(mine)[1] != 0.f) weight = expf(chunk(mine)[0] - m);
    const int n = static_cast<int>(min(int64_t{32}, splits - base));
    for (int j = 0; j < n; ++j) {
      const float w = __shfl_sync(0xffffffffu, weight, j);
      if (w == 0.f && chunk(base + j)[1] == 0.f) continue;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        if (lane + 32 * e < head_dim) acc[e] += chunk(base + j)[2 + lane + 32 * e] * w;
      }
    }
  }
#pragma unroll
  for (int e = 0; e < E; ++e) {
    if (lane + 32 * e < head_dim) out[lane + 32 * e] = narrow<Out>(acc[e] * inv);
  }
}

}  // namespace
}  // namespace tfm::cuda
