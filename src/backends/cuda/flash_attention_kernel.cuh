// The flash-style prefill attention kernel (see flash_attention.cu), in a header of its own so
// tests/cuda_emulation can run it on the CPU.
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"

namespace tfm::cuda {
namespace {

using namespace nvcuda;

constexpr int kWarps = 4;
constexpr int kWarpRows = 16;  // a WMMA fragment's rows: the queries one warp owns
constexpr int kBlockRows = kWarps * kWarpRows;
constexpr int kTileKeys = 64;
constexpr int kFragment = 16;
// Shared rows padded by 16 bytes so a fragment's rows start on different banks.
constexpr int kPad = 8;

// The block's shared memory. Every section (and every warp's part of one) starts on a multiple
// of 32 bytes, as WMMA's loads and stores require.
template <int D>
struct Layout {
  static constexpr int ld = D + kPad;                               // bf16 rows of q, k and v
  static constexpr int p_ld = kTileKeys + kPad;                     // bf16 rows of probabilities
  static constexpr int s_ld = (D > kTileKeys ? D : kTileKeys) + 4;  // f32 rows: scores, then P·V
  static constexpr size_t q_bytes = size_t{kBlockRows} * ld * 2;
  static constexpr size_t kv_bytes = size_t{kTileKeys} * ld * 2;
  static constexpr size_t s_bytes = size_t{kBlockRows} * s_ld * 4;
  static constexpr size_t p_bytes = size_t{kBlockRows} * p_ld * 2;
  static constexpr size_t total = q_bytes + 2 * kv_bytes + s_bytes + p_bytes;
};

using Bf16Fragment =
    wmma::fragment<wmma::matrix_a, kFragment, kFragment, kFragment, __nv_bfloat16, wmma::row_major>;
using Accumulator = wmma::fragment<wmma::accumulator, kFragment, kFragment, kFragment, float>;

// Rows first .. first + 63 of one head of a [B, n, heads, D] tensor into a bf16 tile; rows past n,
// and with a mask (the batch row's [n] key mask) masked rows, are zeros, so a non-finite value in
// a padded slot cannot reach a gradient through a zero probability.
template <int D, typename T>
__device__ void load_rows(const T* src, int64_t b, int64_t n, int64_t heads, int64_t head,
                          int64_t first, __nv_bfloat16* tile, const int32_t* mask = nullptr) {
  for (int e = threadIdx.x; e < kTileKeys * D; e += blockDim.x) {
    const int r = e / D, d = e % D;
    const int64_t j = first + r;
    const bool kept = j < n && (mask == nullptr || mask[b * n + j] != 0);
    const float x = kept ? widen(src[((b * n + j) * heads + head) * D + d]) : 0.f;
    tile[r * Layout<D>::ld + d] = __float2bfloat16_rn(x);
  }
}

// The keys a block's queries first_query .. first_query + 63 may see end at their largest slot
// (causal: later key tiles are skipped).
__device__ inline int64_t keys_seen_by(const int32_t* slots, const AttentionShape& s,
                                       int64_t first_query) {
  int64_t end = 0;
  for (int64_t i = first_query; i < min(first_query + kBlockRows, s.seq); ++i) {
    end = max(end, static_cast<int64_t>(slots[i]) + 1);
  }
  return min(end, s.cache_len);
}

// The tile's keys and values; keys past the cache or masked out are zeros, so a stale or
// non-finite value in a masked slot cannot reach the output through a zero probability. (Slots
// a query may not see for causality hold the sequence's own later tokens.)
template <int D>
__device__ void load_tile(const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* mask,
                          const AttentionShape& s, int64_t b, int64_t kvh, int64_t key0,
                          __nv_bfloat16* ks, __nv_bfloat16* vs) {
  constexpr int kVectors = D / 8;  // 16-byte pieces of a row
  for (int e = threadIdx.x; e < kTileKeys * kVectors; e += blockDim.x) {
    const int c = e / kVectors, part = e % kVectors;
    const int64_t j = key0 + c;
    uint4 key{0, 0, 0, 0}, value{0, 0, 0, 0};
    if (j < s.cache_len && mask[b * s.cache_len + j] != 0) {
      const int64_t at = ((b * s.cache_len + j) * s.kv_heads + kvh) * D + part * 8;
      key = *reinterpret_cast<const uint4*>(k + at);
      value = *reinterpret_cast<const uint4*>(v + at);
    }
    *reinterpret_cast<uint4*>(ks + c * Layout<D>::ld + part * 8) = key;
    *reinterpret_cast<uint4*>(vs + c * Layout<D>::ld + part * 8) = value;
  }
}

// staging [16, 64] (f32, s_ld) = a [16, D] times b^T, b's 64 rows [64, D] (bf16, ld): a warp's
// 16 rows against a tile's 64.
template <int D>
__device__ void product_with_rows_t(const __nv_bfloat16* a, const __nv_bfloat16* b,
                                    float* staging) {
#pragma unroll
  for (int cb = 0; cb < kTileKeys / kFragment; ++cb) {
    Accumulator acc;
    wmma::fill_fragment(acc, 0.f);
#pragma unroll
    for (int kb = 0; kb < D / kFragment; ++kb) {
      Bf16Fragment x;
      wmma::fragment<wmma::matrix_b, kFragment, kFragment, kFragment, __nv_bfloat16,
                     wmma::col_major>
          y_t;
      wmma::load_matrix_sync(x, a + kb * kFragment, Layout<D>::ld);
      wmma::load_matrix_sync(y_t, b + cb * kFragment * Layout<D>::ld + kb * kFragment,
                             Layout<D>::ld);
      wmma::mma_sync(acc, x, y_t, acc);
    }
    wmma::store_matrix_sync(staging + cb * kFragment, acc, Layout<D>::s_ld, wmma::mem_row_major);
  }
}

// acc += p [16, 64] (bf16, p_ld) times columns db * 16 .. db * 16 + 15 of rows [64, D] (bf16, ld).
template <int D>
__device__ void accumulate_column_block(const __nv_bfloat16* p, const __nv_bfloat16* rows, int db,
                                        Accumulator& acc) {
#pragma unroll
  for (int kb = 0; kb < kTileKeys / kFragment; ++kb) {
    Bf16Fragment x;
    wmma::fragment<wmma::matrix_b, kFragment, kFragment, kFragment, __nv_bfloat16, wmma::row_major>
        y;
    wmma::load_matrix_sync(x, p + kb * kFragment, Layout<D>::p_ld);
    wmma::load_matrix_sync(y, rows + kb * kFragment * Layout<D>::ld + db * kFragment,
                           Layout<D>::ld);
    wmma::mma_sync(acc, x, y, acc);
  }
}

// staging [16, D] (f32, s_ld) = p [16, 64] times rows [64, D].
template <int D>
__device__ void product_with_rows(const __nv_bfloat16* p, const __nv_bfloat16* rows,
                                  float* staging) {
#pragma unroll
  for (int db = 0; db < D / kFragment; ++db) {
    Accumulator acc;
    wmma::fill_fragment(acc, 0.f);
    accumulate_column_block<D>(p, rows, db, acc);
    wmma::store_matrix_sync(staging + db * kFragment, acc, Layout<D>::s_ld, wmma::mem_row_major);
  }
}

// One lane's share of a warp's 16 query rows: lanes 2r and 2r+1 own row r, each half of its
// columns (of the key tile while scoring, of head_dim in the output).
template <int D>
struct RowState {
  float max = -INFINITY, sum = 0.f, acc[D / 2] = {};
};

// Turns the lane's half-row of scores into bf16 probabilities against the row's running max and
// rescales what the row has gathered so far. Keys the query cannot see score -inf; until a row
// has seen a key its max stays -inf and it gathers nothing.
template <int D>
__device__ void softmax_step(float* scores_row, __nv_bfloat16* probs_row, const int32_t* mask,
                             const AttentionShape& s, int64_t b, int64_t key0, int64_t row_end,
                             float scale, int half, RowState<D>& st) {
  constexpr int kCols = kTileKeys / 2;
  float tile_max = -INFINITY;
#pragma unroll 8
  for (int c = half * kCols; c < (half + 1) * kCols; ++c) {
    const int64_t j = key0 + c;
    const bool visible = j < row_end && mask[b * s.cache_len + j] != 0;
    const float score = visible ? scores_row[c] * scale : -INFINITY;
    scores_row[c] = score;
    tile_max = fmaxf(tile_max, score);
  }
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
  const float max_new = fmaxf(st.max, tile_max);
  const bool seen = max_new != -INFINITY;
  const float correction = seen ? expf(st.max - max_new) : 1.f;
  float tile_sum = 0.f;
#pragma unroll 8
  for (int c = half * kCols; c < (half + 1) * kCols; ++c) {
    const float p = seen ? expf(scores_row[c] - max_new) : 0.f;
    probs_row[c] = __float2bfloat16_rn(p);
    tile_sum += p;
  }
  tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
  st.sum = st.sum * correction + tile_sum;
  st.max = max_new;
#pragma unroll
  for (int d = 0; d < D / 2; ++d) st.acc[d] *= correction;
}

// What the backward pass needs of each query row (row = (b * seq + i) * q_heads + h):
// stats[2 * row] = log-sum-exp of its scaled scores, stats[2 * row + 1] = delta = dy · out
// (zeros for a query that sees no key).
struct RowStatsTarget {
  const float* dy;
  float* stats;
};

// The forward pass (q f32, or bf16 under autocast) writes out [B, S, Hq, D]; with kStats it
// writes the rows' backward statistics instead.
template <int D, typename Q, bool kStats>
__global__ void __launch_bounds__(kWarps * 32)
    flash_attention_kernel(const Q* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                           const __nv_bfloat16* __restrict__ v, const int32_t* __restrict__ mask,
                           const int32_t* __restrict__ slots, AttentionShape s, float scale,
                           float* __restrict__ out, RowStatsTarget stats) {
  using L = Layout<D>;
  TFM_DYNAMIC_SHARED_MEMORY(smem);
  auto* qs = reinterpret_cast<__nv_bfloat16*>(smem);
  auto* ks = reinterpret_cast<__nv_bfloat16*>(smem + L::q_bytes);
  auto* vs = reinterpret_cast<__nv_bfloat16*>(smem + L::q_bytes + L::kv_bytes);
  auto* scores = reinterpret_cast<float*>(smem + L::q_bytes + 2 * L::kv_bytes);
  auto* probs = reinterpret_cast<__nv_bfloat16*>(smem + L::q_bytes + 2 * L::kv_bytes + L::s_bytes);

  const int64_t first_query = int64_t{blockIdx.x} * kBlockRows, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = h / (s.q_heads / s.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = lane / 2, half = lane % 2;

  load_rows<D>(q, b, s.seq, s.q_heads, h, first_query, qs);  // rounded to bf16 for the product
  const int64_t keys_end = keys_seen_by(slots, s, first_query);

  const int64_t i = first_query + warp * kWarpRows + row;
  const int64_t row_end = i < s.seq ? min(static_cast<int64_t>(slots[i]) + 1, s.cache_len) : 0;
  float* warp_scores = scores + warp * kWarpRows * L::s_ld;
  __nv_bfloat16* warp_probs = probs + warp * kWarpRows * L::p_ld;
  const __nv_bfloat16* warp_q = qs + warp * kWarpRows * L::ld;
  RowState<D> st;

  for (int64_t key0 = 0; key0 < keys_end; key0 += kTileKeys) {
    __syncthreads();  // the previous tile is no longer read
    load_tile<D>(k, v, mask, s, b, kvh, key0, ks, vs);
    __syncthreads();

    product_with_rows_t<D>(warp_q, ks, warp_scores);  // S = q k^T, the warp's 16 queries
    __syncwarp();
    softmax_step<D>(warp_scores + row * L::s_ld, warp_probs + row * L::p_ld, mask, s, b, key0,
                    row_end, scale, half, st);
    __syncwarp();

    // The tile's share of the output, P v, staged where the scores were.
    product_with_rows<D>(warp_probs, vs, warp_scores);
    __syncwarp();
    const float* staged = warp_scores + row * L::s_ld + half * (D / 2);
#pragma unroll
    for (int d = 0; d < D / 2; ++d) st.acc[d] += staged[d];
    __syncwarp();  // read before the next tile's scores overwrite it
  }

  // A query that sees no key gets zeros, as on the CPU.
  const float inv = st.sum > 0.f ? 1.f / st.sum : 0.f;
  const int64_t at = ((b * s.seq + i) * s.q_heads + h) * D + half * (D / 2);
  if constexpr (kStats) {
    float dot = 0.f;
    if (i < s.seq) {
#pragma unroll
      for (int d = 0; d < D / 2; ++d) dot += stats.dy[at + d] * (st.acc[d] * inv);
    }
    dot += __shfl_xor_sync(0xffffffffu, dot, 1);  // every lane, before any leaves
    if (i < s.seq && half == 0) {
      float* row_stats = stats.stats + 2 * ((b * s.seq + i) * s.q_heads + h);
      row_stats[0] = st.sum > 0.f ? st.max + logf(st.sum) : 0.f;
      row_stats[1] = dot;
    }
  } else {
    if (i >= s.seq) return;
#pragma unroll
    for (int d = 0; d < D / 2; ++d) out[at + d] = st.acc[d] * inv;
  }
}

}  // namespace
}  // namespace tfm::cuda
