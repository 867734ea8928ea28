// Attention over the static KV cache, split-K style (prefill over a bf16 cache runs flash-style,
// flash_attention.cu): each block runs an online softmax over one chunk of keys for one (batch,
// query, head), its warps taking every kWarps-th key, and the last of a row's blocks to finish
// merges the chunks (one launch in all). Query heads of a group read the same KV head
// (grouped-query).
#include <cuda_bf16.h>

#include <algorithm>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int64_t kMinKeysPerSplit = 64;
constexpr int64_t kTargetBlocks = 512;  // enough blocks to fill 132 multiprocessors a few times

struct Split {
  int64_t count, keys;
};

// Empty shapes (no rows or no keys) get one split of one key, so nothing divides by zero.
Split split_of(const AttentionShape& s) {
  const int64_t rows = std::max<int64_t>(1, s.batch * s.seq * s.q_heads);
  const int64_t max_splits = std::max<int64_t>(1, s.cache_len / kMinKeysPerSplit);
  const int64_t wanted = std::clamp<int64_t>((kTargetBlocks + rows - 1) / rows, 1, max_splits);
  const int64_t keys = std::max<int64_t>(1, (s.cache_len + wanted - 1) / wanted);
  return {std::max<int64_t>(1, (s.cache_len + keys - 1) / keys), keys};
}

// A partial result: [max score, sum of exp, unnormalized output (head_dim)].
__device__ __forceinline__ float* partial_at(float* partials, int64_t row, int64_t split,
                                             int64_t splits, int head_dim) {
  return partials + (row * splits + split) * (head_dim + 2);
}

// Merges a row's chunks into its output, one warp. A query that sees no key gets zeros, as on the
// CPU. Only chunks that saw no key (sum 0) are skipped: a NaN sum is kept, so a NaN score reaches
// the output as it does on the CPU instead of silently dropping its chunk. The chunks were written
// by other blocks of this launch: they are read as volatile, from L2, past this SM's L1.
__device__ void merge_chunks(const volatile float* first, int64_t splits, int head_dim, float* out,
                             int lane) {
  float m = -INFINITY;
  for (int64_t sp = 0; sp < splits; ++sp) {
    const volatile float* p = first + sp * (head_dim + 2);
    if (p[1] != 0.f) m = fmaxf(m, p[0]);
  }
  float denom = 0.f;
  for (int64_t sp = 0; sp < splits; ++sp) {
    const volatile float* p = first + sp * (head_dim + 2);
    const float l = p[1];
    if (l != 0.f) denom += l * expf(p[0] - m);
  }
  const float inv = denom != 0.f ? 1.f / denom : 0.f;
  for (int d = lane; d < head_dim; d += 32) {
    float sum = 0.f;
    for (int64_t sp = 0; sp < splits; ++sp) {
      const volatile float* p = first + sp * (head_dim + 2);
      if (p[1] != 0.f) sum += p[2 + d] * expf(p[0] - m);
    }
    out[d] = sum * inv;
  }
}

template <typename KV, int E>
__global__ void __launch_bounds__(kWarps * 32)
    attention_partial_kernel(const float* __restrict__ q, const KV* __restrict__ k,
                             const KV* __restrict__ v, const int32_t* __restrict__ mask,
                             const int32_t* __restrict__ slots, AttentionShape s, float scale,
                             int64_t keys_per_split, float* __restrict__ partials,
                             unsigned* __restrict__ arrivals, float* __restrict__ out) {
  const int64_t row = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int D = static_cast<int>(s.head_dim);
  const int64_t h = row % s.q_heads, token = row / s.q_heads;
  const int64_t i = token % s.seq, b = token / s.seq;
  const int64_t kvh = h / (s.q_heads / s.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  float qr[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    qr[e] = d < D ? q[row * D + d] : 0.f;
  }
  const int64_t visible_end = min(static_cast<int64_t>(slots[i]) + 1, s.cache_len);
  const int64_t first = split * keys_per_split;
  const int64_t last = min(first + keys_per_split, visible_end);
  float m = -INFINITY, l = 0.f, acc[E] = {};
  for (int64_t j = first + warp; j < last; j += kWarps) {
    if (mask[b * s.cache_len + j] == 0) continue;
    const int64_t at = ((b * s.cache_len + j) * s.kv_heads + kvh) * D;
    float dot = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      if (d < D) dot += qr[e] * widen(k[at + d]);
    }
    const float score = warp_sum(dot) * scale;
    const float m_new = fmaxf(m, score);
    const float correction = expf(m - m_new), p = expf(score - m_new);
    l = l * correction + p;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      acc[e] = acc[e] * correction + (d < D ? p * widen(v[at + d]) : 0.f);
    }
    m = m_new;
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
  // then the warp barrier that orders the lanes' writes before lane 0's atomic); the row's last
  // block merges, and leaves its counter at zero for the next launch.
  __threadfence();
  __syncwarp();
  unsigned arrived = 0;
  if (lane == 0) {
    __threadfence();
    arrived = atomicAdd(arrivals + row, 1u);
  }
  if (__shfl_sync(0xffffffffu, arrived, 0) != static_cast<unsigned>(splits - 1)) return;
  __threadfence();
  merge_chunks(partial_at(partials, row, 0, splits, D), splits, D, out + row * D, lane);
  if (lane == 0) arrivals[row] = 0;
}

// Where a launch writes: the chunks' partial results, the rows' arrival counters, the output.
struct Targets {
  float* partials;
  unsigned* arrivals;
  float* out;
};

template <typename KV, int E>
void launch_partials(const float* q, const void* k, const void* v, const int32_t* mask,
                     const int32_t* slots, const AttentionShape& s, float scale, Split split,
                     const Targets& t, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(s.batch * s.seq * s.q_heads),
                  static_cast<unsigned>(split.count));
  attention_partial_kernel<KV, E><<<grid, kWarps * 32, 0, stream>>>(
      q, static_cast<const KV*>(k), static_cast<const KV*>(v), mask, slots, s, scale, split.keys,
      t.partials, t.arrivals, t.out);
}

template <typename KV>
void launch_for_head_dim(const float* q, const void* k, const void* v, const int32_t* mask,
                         const int32_t* slots, const AttentionShape& s, float scale, Split split,
                         const Targets& t, cudaStream_t stream) {
  const int64_t per_lane = (s.head_dim + 31) / 32;
  if (per_lane <= 1) {
    launch_partials<KV, 1>(q, k, v, mask, slots, s, scale, split, t, stream);
  } else if (per_lane <= 2) {
    launch_partials<KV, 2>(q, k, v, mask, slots, s, scale, split, t, stream);
  } else if (per_lane <= 4) {
    launch_partials<KV, 4>(q, k, v, mask, slots, s, scale, split, t, stream);
  } else if (per_lane <= 8) {
    launch_partials<KV, 8>(q, k, v, mask, slots, s, scale, split, t, stream);
  } else {
    throw Error("[cuda attention] head_dim " + std::to_string(s.head_dim) +
                " is larger than the supported 256");
  }
}

}  // namespace

size_t attention_scratch_bytes(const AttentionShape& shape, DType kv_dtype) {
  if (flash_attention_applies(shape, kv_dtype)) return 0;
  const Split split = split_of(shape);
  return static_cast<size_t>(shape.batch * shape.seq * shape.q_heads * split.count *
                             (shape.head_dim + 2)) *
         sizeof(float);
}

void attention(const float* q, const void* k, const void* v, DType kv_dtype, const int32_t* mask,
               const int32_t* slots, const AttentionShape& shape, float scale, float* out,
               void* scratch, unsigned* arrivals, cudaStream_t stream) {
  if (shape.batch * shape.seq * shape.q_heads == 0) return;  // a grid of 0 blocks is a launch error
  if (flash_attention_applies(shape, kv_dtype)) {
    flash_attention(q, k, v, mask, slots, shape, scale, out, stream);
    return;
  }
  const Split split = split_of(shape);
  const Targets t{static_cast<float*>(scratch), arrivals, out};
  if (kv_dtype == DType::bf16) {
    launch_for_head_dim<__nv_bfloat16>(q, k, v, mask, slots, shape, scale, split, t, stream);
  } else if (kv_dtype == DType::f32) {
    launch_for_head_dim<float>(q, k, v, mask, slots, shape, scale, split, t, stream);
  } else {
    throw Error("[cuda attention] KV cache of dtype " + std::string(dtype_name(kv_dtype)) +
                " is not supported (f32, bf16)");
  }
  check_launch("attention");
}

}  // namespace tfm::cuda
