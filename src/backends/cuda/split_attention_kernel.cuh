// The split-K attention kernel over the static cache (see attention.cu), in a header of its own
// so tests/cuda_emulation can run it on the CPU.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>

#include "backends/cuda/attention_inputs_kernel.cuh"
#include "backends/cuda/chunk_merge.cuh"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"

namespace tfm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int64_t kMinKeysPerSplit = 16;
// About as many blocks as an H200 holds at once (132 multiprocessors x 16 blocks of 128 threads):
// decode has few rows, and each warp of a block walks its keys a batch at a time.
constexpr int64_t kTargetBlocks = 2048;

// How many chunks a row's keys may be cut into: the launch's blocks for the row. The cut itself is
// made in the kernel, over the keys a query sees (its slot + 1, known only when the step runs),
// into as many of those chunks as give each warp at least one batch of keys (KeyBatch); the
// blocks past them leave at once, so a short context in a long cache neither spreads a few keys
// over a hundred blocks nor merges a hundred chunks.
struct Split {
  int64_t count;
};

// Empty shapes (no rows or no keys) get one split, so nothing divides by zero.
Split split_of(const AttentionShape& s) {
  const int64_t rows = std::max<int64_t>(1, s.batch * s.seq * s.q_heads);
  const int64_t max_splits = std::max<int64_t>(1, s.cache_len / kMinKeysPerSplit);
  return {std::clamp<int64_t>((kTargetBlocks + rows - 1) / rows, 1, max_splits)};
}

// The fresh token's q (head h) normed and rotated, and (when the block needs them) its k (normed,
// rotated) and v (head kvh) rounded to the cache's dtype, as prepare_attention would leave them:
// by warps 0, 1 and 2.
template <typename KV>
__device__ void prepare_fresh_token(const FreshToken& fresh, const AttentionShape& s, int64_t b,
                                    int64_t h, int64_t kvh, bool needs_kv, int warp, int lane,
                                    float* q_out, float* k_out, float* v_out) {
  const Params p{fresh.in, fresh.eps, fresh.scaling, s, nullptr};
  const int64_t d = s.head_dim, half = d / 2;
  if (warp == 0) {
    norm_and_rotate(p, fresh.in.q + (b * s.q_heads + h) * d, fresh.in.q_norm, b, lane,
                    [&](int f, float first, float second) {
                      q_out[f] = first;
                      q_out[f + half] = second;
                    });
  } else if (warp == 1 && needs_kv) {
    norm_and_rotate(p, fresh.in.k + (b * s.kv_heads + kvh) * d, fresh.in.k_norm, b, lane,
                    [&](int f, float first, float second) {
                      k_out[f] = widen(narrow<KV>(first));
                      k_out[f + half] = widen(narrow<KV>(second));
                    });
  } else if (warp == 2 && needs_kv) {
    prefetch_row(fresh.in.v + (b * s.kv_heads + kvh) * d, static_cast<int>(d), lane);
    for (int64_t e = lane; e < d; e += 32) {
      v_out[e] = widen(narrow<KV>(fresh.in.v[(b * s.kv_heads + kvh) * d + e]));
    }
  }
}

// A warp's next keys, kKeysAtOnce of them kWarps apart from j0 (the warp's keys in its order):
// their rows of k and v and whether each is kept, loaded together so that their round trips
// overlap. Keys from `last` on are not loaded, nor the fresh token's own slot (`own_slot`, -1 if
// none), which another block may be writing; a masked key's row is loaded but never used. Two
// at once: a decode warp has one or two keys at the usual cuts, and four took the kernel from 48
// to 80 registers (`-Xptxas -v`, head_dim 128), six blocks a multiprocessor where a long cache's
// 2048-block launches want ten; two take 64.
constexpr int kKeysAtOnce = 2;
constexpr int64_t kMinKeysPerChunk = kWarps * kKeysAtOnce;

template <typename KV, int E>
struct KeyBatch {
  KV k[kKeysAtOnce][E], v[kKeysAtOnce][E];
  bool kept[kKeysAtOnce];

  __device__ void load(const KV* k_cache, const KV* v_cache, const int32_t* mask,
                       const AttentionShape& s, int64_t b, int64_t kvh, int64_t j0, int64_t last,
                       int64_t own_slot, int lane) {
#pragma unroll
    for (int u = 0; u < kKeysAtOnce; ++u) {
      const int64_t j = j0 + u * kWarps;
      const bool present = j < last;
      kept[u] = present && mask[b * s.cache_len + j] != 0;
      const bool read = present && j != own_slot;
      const int64_t at = ((b * s.cache_len + j) * s.kv_heads + kvh) * s.head_dim;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int d = lane + 32 * e;
        k[u][e] = read && d < s.head_dim ? k_cache[at + d] : KV{};
        v[u][e] = read && d < s.head_dim ? v_cache[at + d] : KV{};
      }
    }
  }
};

// q, k, v and out are not __restrict__: the fused form writes the fresh token's k and v into the
// caches it reads, and its out may be the buffer its fresh q came in.
template <typename KV, int E>
__global__ void __launch_bounds__(kWarps * 32)
    attention_partial_kernel(const float* q, const KV* k, const KV* v,
                             const int32_t* __restrict__ mask, const int32_t* __restrict__ slots,
                             AttentionShape s, float scale, float* __restrict__ partials,
                             unsigned* __restrict__ arrivals, float* out, const FreshToken fresh) {
  // When nothing of the step writes the slot, the mask or the keys (FreshToken::keys_before_wait),
  // the block's indices (64-bit divisions) and its first keys are worked out and loaded before
  // the wait, while the kernel before finishes.
  const bool fused = fresh.in.q != nullptr, early = fused && fresh.keys_before_wait;
  before_early_reads(early);
  const int64_t row = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int D = static_cast<int>(s.head_dim);
  const int64_t h = row % s.q_heads, token = row / s.q_heads;
  const int64_t i = token % s.seq, b = token / s.seq;
  const int64_t kvh = h / (s.q_heads / s.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t slot = slots[i];
  const int64_t visible_begin = first_visible_key(slot, s.window),
                visible_end = min(slot + 1, s.cache_len),
                visible = max(int64_t{0}, visible_end - visible_begin);
  const int64_t keys_per_chunk = max(kMinKeysPerChunk, (visible + splits - 1) / splits);
  const int64_t chunks = max(int64_t{1}, (visible + keys_per_chunk - 1) / keys_per_chunk);
  if (split >= chunks) {
    after_early_reads(early);  // a kernel ends only after its wait
    return;
  }
  const int64_t first = visible_begin + split * keys_per_chunk;
  const int64_t last = min(first + keys_per_chunk, visible_end);
  // The warp's first keys go out before the fresh token is prepared: neither waits on the other.
  KeyBatch<KV, E> batch;
  batch.load(k, v, mask, s, b, kvh, first + warp, last, fused ? slot : -1, lane);
  after_early_reads(early);

  // With the step's token fresh (seq 1): its q, and its k and v as the cache would hold them.
  // The first query head of a group, first split, stores the group's k and v; the others read
  // them from shared memory when their keys include the slot, never from the slot.
  const bool stores =
      fused && h % (s.q_heads / s.kv_heads) == 0 && split == 0 && slot >= 0 && slot < s.cache_len;
  __shared__ float fresh_q[32 * E], fresh_k[32 * E], fresh_v[32 * E];
  if (fused) {
    const bool needs_kv = stores || (slot >= first && slot < last);
    prepare_fresh_token<KV>(fresh, s, b, h, kvh, needs_kv, warp, lane, fresh_q, fresh_k, fresh_v);
    __syncthreads();
    if (stores) {
      const int64_t at = ((b * s.cache_len + slot) * s.kv_heads + kvh) * D;
      for (int d = static_cast<int>(threadIdx.x); d < D; d += blockDim.x) {
        const_cast<KV*>(k)[at + d] = narrow<KV>(fresh_k[d]);
        const_cast<KV*>(v)[at + d] = narrow<KV>(fresh_v[d]);
      }
    }
  }

  float qr[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    qr[e] = d < D ? (fused ? fresh_q[d] : q[row * D + d]) : 0.f;
  }
  float m = -INFINITY, l = 0.f, acc[E] = {};
  for (int64_t j0 = first + warp; j0 < last; j0 += kWarps * kKeysAtOnce) {
    if (j0 != first + warp) batch.load(k, v, mask, s, b, kvh, j0, last, fused ? slot : -1, lane);
#pragma unroll
    for (int u = 0; u < kKeysAtOnce; ++u) {
      if (!batch.kept[u]) continue;
      const bool own = fused && j0 + u * kWarps == slot;  // the fresh token's key: shared memory
      float dot = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int d = lane + 32 * e;
        if (d < D) dot += qr[e] * (own ? fresh_k[d] : widen(batch.k[u][e]));
      }
      const float score = warp_sum(dot) * scale;
      const float m_new = fmaxf(m, score);
      const float correction = expf(m - m_new), p = expf(score - m_new);
      l = l * correction + p;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int d = lane + 32 * e;
        acc[e] =
            acc[e] * correction + (d < D ? p * (own ? fresh_v[d] : widen(batch.v[u][e])) : 0.f);
      }
      m = m_new;
    }
  }

  __shared__ float warp_m[kWarps], warp_l[kWarps];
  __shared__ float warp_acc[kWarps][32 * E];
  if (lane == 0) warp_m[warp] = m, warp_l[warp] = l;
#pragma unroll
  for (int e = 0; e < E; ++e) warp_acc[warp][lane + 32 * e] = acc[e];
  __syncthreads();
  if (warp != 0) return;
  float block_m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) {
    if (warp_l[w] > 0.f) block_m = fmaxf(block_m, warp_m[w]);
  }
  float block_l = 0.f, chunk_out[E] = {};
  for (int w = 0; w < kWarps; ++w) {
    if (warp_l[w] == 0.f) continue;
    const float weight = expf(warp_m[w] - block_m);
    block_l += warp_l[w] * weight;
#pragma unroll
    for (int e = 0; e < E; ++e) chunk_out[e] += warp_acc[w][lane + 32 * e] * weight;
  }
  float* dst = partial_at(partials, row, split, splits, D);
  if (lane == 0) dst[0] = block_m, dst[1] = block_l;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    if (d < D) dst[2 + d] = chunk_out[e];
  }
  // Every lane's part of this chunk is visible device-wide before lane 0 counts it (the fence,
  // then the warp barrier that orders the lanes' writes before lane 0's atomic), and the second
  // barrier orders lane 0's atomic before the other lanes' reads of the row's chunks; the row's
  // last block merges, and leaves its counter at zero for the next launch.
  __threadfence();
  __syncwarp();
  unsigned arrived = 0;
  if (lane == 0) {
    __threadfence();
    arrived = atomicAdd(arrivals + row, 1u);
  }
  __syncwarp();
  if (__shfl_sync(0xffffffffu, arrived, 0) != static_cast<unsigned>(chunks - 1)) return;
  __threadfence();
  merge_chunks<E>(partial_at(partials, row, 0, splits, D), chunks, D, out + row * D, lane);
  if (lane == 0) arrivals[row] = 0;
}

}  // namespace
}  // namespace tfm::cuda
