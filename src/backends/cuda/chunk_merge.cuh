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

// How many chunks' values a merging warp loads before it uses them, about 24 floats a lane: one
// round trip to L2 a group, where loading each chunk after using the one before cost one a chunk
// (16 at batch-1 decode over a 256-slot cache, 128 over a long one). More raise the registers of
// the decode attention kernel (72 at head_dim 128, E = 4; 88 with 8 chunks at once).
template <int E>
constexpr int kChunksAtOnce = E >= 8 ? 2 : 24 / (E + 2);

// Merges a row's chunks into its output, one warp, in one pass: the online softmax over the
// chunks, each lane keeping head_dim / 32 of the output and every lane reading each chunk's
// max and sum (one broadcast load). A query that sees no key gets zeros, as on the CPU. Only
// chunks that saw no key (sum 0) are skipped: a NaN sum is kept, so a NaN score reaches the
// output as it does on the CPU instead of silently dropping its chunk. The chunks were written by
// other blocks of this launch: they are read as volatile, from L2, past this SM's L1.
template <int E, typename Out>
__device__ void merge_chunks(const volatile float* first, int64_t splits, int head_dim, Out* out,
                             int lane) {
  float m = -INFINITY, denom = 0.f, acc[E] = {};
  constexpr int kAtOnce = kChunksAtOnce<E>;
  const int stride = head_dim + 2;
  for (int64_t left = splits; left > 0; left -= kAtOnce, first += kAtOnce * stride) {
    float chunk_m[kAtOnce], chunk_l[kAtOnce], value[kAtOnce][E];
#pragma unroll
    for (int c = 0; c < kAtOnce; ++c) {
      const volatile float* chunk = first + c * stride;
      const bool present = c < left;
      chunk_m[c] = present ? chunk[0] : 0.f;
      chunk_l[c] = present ? chunk[1] : 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int d = lane + 32 * e;
        value[c][e] = present && d < head_dim ? chunk[2 + d] : 0.f;
      }
    }
#pragma unroll
    for (int c = 0; c < kAtOnce; ++c) {
      if (chunk_l[c] == 0.f) continue;
      const float m_new = fmaxf(m, chunk_m[c]);
      const float correction = expf(m - m_new), weight = expf(chunk_m[c] - m_new);
      denom = denom * correction + chunk_l[c] * weight;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = acc[e] * correction + value[c][e] * weight;
      m = m_new;
    }
  }
  const float inv = denom != 0.f ? 1.f / denom : 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    if (lane + 32 * e < head_dim) out[lane + 32 * e] = narrow<Out>(acc[e] * inv);
  }
}

}  // namespace
}  // namespace tfm::cuda
