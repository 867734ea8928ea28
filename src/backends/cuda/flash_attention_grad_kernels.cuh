// The flash-style attention backward kernels (see flash_attention.cu), in a header of their own
// so tests/cuda_emulation can run them on the CPU. After flash_attention_kernel<.., kStats> has
// written each query row's log-sum-exp and delta = dy · out, the probabilities of any tile are
// P = exp(scale * q·k - lse) with no pass over the row, and dS = scale * P * (dy·v - delta).
// One kernel walks the query tiles for a tile of keys (dk = dS^T q, dv = P^T dy, summed over the
// group's query heads), the other the key tiles for a tile of queries (dq = dS k). All products
// are bf16 WMMA tiles with f32 accumulation, as in the forward pass.
#pragma once

#include "backends/cuda/flash_attention_kernel.cuh"

namespace tfm::cuda {
namespace {

// The backward blocks' shared memory: four bf16 tiles (q, dy, k, v rows), two f32 staging areas
// per warp (scores, then dy·v), a bf16 tile per warp (P or dS), and per-tile masks, slots and row
// statistics. 32-byte aligned sections, as WMMA requires.
template <int D>
struct GradLayout {
  static constexpr int ld = Layout<D>::ld, p_ld = Layout<D>::p_ld, s_ld = Layout<D>::s_ld;
  static constexpr size_t tile_bytes = size_t{kTileKeys} * ld * 2;
  static constexpr size_t staging_bytes = size_t{kBlockRows} * s_ld * 4;
  static constexpr size_t probs_bytes = size_t{kBlockRows} * p_ld * 2;
  static constexpr size_t q = 0, dy = tile_bytes, k = 2 * tile_bytes, v = 3 * tile_bytes;
  static constexpr size_t scores = 4 * tile_bytes, d_probs = scores + staging_bytes;
  static constexpr size_t probs = d_probs + staging_bytes;
  static constexpr size_t keys_kept = probs + probs_bytes;           // int per key of the tile
  static constexpr size_t query_slots = keys_kept + kTileKeys * 4;   // int per query of the tile
  static constexpr size_t row_stats = query_slots + kBlockRows * 4;  // (lse, delta) per query
  static constexpr size_t total = row_stats + kBlockRows * 8;
};
// An sm_90 block may have 227 KB of shared memory.
static_assert(GradLayout<128>::total <= 227 * 1024 && ForwardLayout<128>::total <= 227 * 1024);

template <int D>
struct GradTiles {
  __nv_bfloat16 *q, *dy, *k, *v, *probs;
  float *scores, *d_probs, *row_stats;
  int32_t *keys_kept, *query_slots;

  __device__ explicit GradTiles(unsigned char* smem)
      : q(reinterpret_cast<__nv_bfloat16*>(smem + GradLayout<D>::q)),
        dy(reinterpret_cast<__nv_bfloat16*>(smem + GradLayout<D>::dy)),
        k(reinterpret_cast<__nv_bfloat16*>(smem + GradLayout<D>::k)),
        v(reinterpret_cast<__nv_bfloat16*>(smem + GradLayout<D>::v)),
        probs(reinterpret_cast<__nv_bfloat16*>(smem + GradLayout<D>::probs)),
        scores(reinterpret_cast<float*>(smem + GradLayout<D>::scores)),
        d_probs(reinterpret_cast<float*>(smem + GradLayout<D>::d_probs)),
        row_stats(reinterpret_cast<float*>(smem + GradLayout<D>::row_stats)),
        keys_kept(reinterpret_cast<int32_t*>(smem + GradLayout<D>::keys_kept)),
        query_slots(reinterpret_cast<int32_t*>(smem + GradLayout<D>::query_slots)) {}
};

// Which of the tile's keys exist and are not masked out.
__device__ void load_keys_kept(const int32_t* mask, const AttentionShape& s, int64_t b,
                               int64_t key0, int32_t* keys_kept) {
  for (int c = threadIdx.x; c < kTileKeys; c += blockDim.x) {
    const int64_t j = key0 + c;
    keys_kept[c] = j < s.cache_len && mask[b * s.cache_len + j] != 0;
  }
}

// acc[db] += p [16, 64] times rows [64, D], column block db.
template <int D>
__device__ void accumulate_product(const __nv_bfloat16* p, const __nv_bfloat16* rows,
                                   Accumulator (&acc)[D / kFragment]) {
#pragma unroll
  for (int db = 0; db < D / kFragment; ++db) accumulate_column_block<D>(p, rows, db, acc[db]);
}

// Writes a warp's 16 accumulated rows (f32 [16, D]) through its staging area to rows
// first .. first + 15 of one head of a [B, n, heads, D] tensor, skipping rows past n.
template <int D>
__device__ void store_rows(const Accumulator (&acc)[D / kFragment], float* staging, int lane,
                           float* dst, int64_t b, int64_t n, int64_t heads, int64_t head,
                           int64_t first) {
#pragma unroll
  for (int db = 0; db < D / kFragment; ++db) {
    wmma::store_matrix_sync(staging + db * kFragment, acc[db], Layout<D>::s_ld,
                            wmma::mem_row_major);
  }
  __syncwarp();
  for (int e = lane; e < kWarpRows * D; e += 32) {
    const int r = e / D, d = e % D;
    const int64_t j = first + r;
    if (j < n) dst[((b * n + j) * heads + head) * D + d] = staging[r * Layout<D>::s_ld + d];
  }
  __syncwarp();
}

// dk and dv for a tile of 64 keys of one KV head (16 per warp): over every query head of its
// group and every query tile that sees one of the keys.
template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    flash_attention_dkdv_kernel(const __nv_bfloat16* __restrict__ q,
                                const __nv_bfloat16* __restrict__ k,
                                const __nv_bfloat16* __restrict__ v,
                                const int32_t* __restrict__ mask, const int32_t* __restrict__ slots,
                                const float* __restrict__ dy, const float* __restrict__ stats,
                                AttentionShape s, float scale, float* __restrict__ dk,
                                float* __restrict__ dv) {
  TFM_DYNAMIC_SHARED_MEMORY(smem);
  const GradTiles<D> t(smem);
  const int64_t key0 = int64_t{blockIdx.x} * kTileKeys, kvh = blockIdx.y, b = blockIdx.z;
  const int64_t group = s.q_heads / s.kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = lane / 2, half = lane % 2;
  constexpr int kCols = kBlockRows / 2;  // queries per lane of a key row

  load_rows<D>(k, b, s.cache_len, s.kv_heads, kvh, key0, t.k, mask);
  load_rows<D>(v, b, s.cache_len, s.kv_heads, kvh, key0, t.v, mask);
  load_keys_kept(mask, s, b, key0, t.keys_kept);
  float* scores = t.scores + warp * kWarpRows * Layout<D>::s_ld;  // [16 keys, 64 queries]
  float* d_probs = t.d_probs + warp * kWarpRows * Layout<D>::s_ld;
  __nv_bfloat16* probs = t.probs + warp * kWarpRows * Layout<D>::p_ld;
  const __nv_bfloat16* warp_k = t.k + warp * kWarpRows * Layout<D>::ld;
  const __nv_bfloat16* warp_v = t.v + warp * kWarpRows * Layout<D>::ld;
  const int key = warp * kWarpRows + row;  // this lane's key in the tile

  Accumulator dk_acc[D / kFragment], dv_acc[D / kFragment];
#pragma unroll
  for (int db = 0; db < D / kFragment; ++db) {
    wmma::fill_fragment(dk_acc[db], 0.f);
    wmma::fill_fragment(dv_acc[db], 0.f);
  }

  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    for (int64_t first_query = 0; first_query < s.seq; first_query += kBlockRows) {
      // Causal: a tile whose queries all sit before the keys sees none of them.
      if (keys_seen_by(slots, s, first_query) <= key0) continue;
      __syncthreads();  // the previous query tile is no longer read
      load_rows<D>(q, b, s.seq, s.q_heads, h, first_query, t.q);
      load_rows<D>(dy, b, s.seq, s.q_heads, h, first_query, t.dy);
      for (int r = threadIdx.x; r < kBlockRows; r += blockDim.x) {
        const int64_t i = first_query + r;
        const bool exists = i < s.seq;
        t.query_slots[r] = exists ? slots[i] : -1;
        t.row_stats[2 * r] = exists ? stats[2 * ((b * s.seq + i) * s.q_heads + h)] : 0.f;
        t.row_stats[2 * r + 1] = exists ? stats[2 * ((b * s.seq + i) * s.q_heads + h) + 1] : 0.f;
      }
      __syncthreads();

      product_with_rows_t<D>(warp_k, t.q, scores);    // S^T = k q^T
      product_with_rows_t<D>(warp_v, t.dy, d_probs);  // dP^T = v dy^T
      __syncwarp();
      const int64_t j = key0 + key;
      const bool kept = t.keys_kept[key] != 0;
      float* score_row = scores + row * Layout<D>::s_ld;
      const float* d_prob_row = d_probs + row * Layout<D>::s_ld;
      __nv_bfloat16* prob_row = probs + row * Layout<D>::p_ld;
#pragma unroll 8
      for (int c = half * kCols; c < (half + 1) * kCols; ++c) {
        const bool visible = kept && j <= t.query_slots[c];
        const float p = visible ? expf(score_row[c] * scale - t.row_stats[2 * c]) : 0.f;
        prob_row[c] = __float2bfloat16_rn(p);
        score_row[c] = scale * p * (d_prob_row[c] - t.row_stats[2 * c + 1]);  // dS^T
      }
      __syncwarp();
      accumulate_product<D>(probs, t.dy, dv_acc);  // dv += P^T dy
      __syncwarp();
#pragma unroll 8
      for (int c = half * kCols; c < (half + 1) * kCols; ++c) {
        prob_row[c] = __float2bfloat16_rn(score_row[c]);
      }
      __syncwarp();
      accumulate_product<D>(probs, t.q, dk_acc);  // dk += dS^T q
      __syncwarp();  // read before the next tile overwrites the staging areas
    }
  }
  const int64_t first_key = key0 + warp * kWarpRows;
  store_rows<D>(dk_acc, scores, lane, dk, b, s.cache_len, s.kv_heads, kvh, first_key);
  store_rows<D>(dv_acc, scores, lane, dv, b, s.cache_len, s.kv_heads, kvh, first_key);
}

// dq for a tile of 64 queries of one head (16 per warp): over the key tiles they see.
template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    flash_attention_dq_kernel(const __nv_bfloat16* __restrict__ q,
                              const __nv_bfloat16* __restrict__ k,
                              const __nv_bfloat16* __restrict__ v, const int32_t* __restrict__ mask,
                              const int32_t* __restrict__ slots, const float* __restrict__ dy,
                              const float* __restrict__ stats, AttentionShape s, float scale,
                              float* __restrict__ dq) {
  TFM_DYNAMIC_SHARED_MEMORY(smem);
  const GradTiles<D> t(smem);
  const int64_t first_query = int64_t{blockIdx.x} * kBlockRows, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = h / (s.q_heads / s.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = lane / 2, half = lane % 2;
  constexpr int kCols = kTileKeys / 2;

  load_rows<D>(q, b, s.seq, s.q_heads, h, first_query, t.q);
  load_rows<D>(dy, b, s.seq, s.q_heads, h, first_query, t.dy);
  const int64_t keys_end = keys_seen_by(slots, s, first_query);

  const int64_t i = first_query + warp * kWarpRows + row;
  const bool exists = i < s.seq;
  const int64_t row_end = exists ? min(static_cast<int64_t>(slots[i]) + 1, s.cache_len) : 0;
  const float lse = exists ? stats[2 * ((b * s.seq + i) * s.q_heads + h)] : 0.f;
  const float delta = exists ? stats[2 * ((b * s.seq + i) * s.q_heads + h) + 1] : 0.f;
  float* scores = t.scores + warp * kWarpRows * Layout<D>::s_ld;  // [16 queries, 64 keys]
  float* d_probs = t.d_probs + warp * kWarpRows * Layout<D>::s_ld;
  __nv_bfloat16* probs = t.probs + warp * kWarpRows * Layout<D>::p_ld;
  const __nv_bfloat16* warp_q = t.q + warp * kWarpRows * Layout<D>::ld;
  const __nv_bfloat16* warp_dy = t.dy + warp * kWarpRows * Layout<D>::ld;

  Accumulator dq_acc[D / kFragment];
#pragma unroll
  for (int db = 0; db < D / kFragment; ++db) wmma::fill_fragment(dq_acc[db], 0.f);

  for (int64_t key0 = 0; key0 < keys_end; key0 += kTileKeys) {
    __syncthreads();  // the previous key tile is no longer read
    load_rows<D>(k, b, s.cache_len, s.kv_heads, kvh, key0, t.k, mask);
    load_rows<D>(v, b, s.cache_len, s.kv_heads, kvh, key0, t.v, mask);
    load_keys_kept(mask, s, b, key0, t.keys_kept);
    __syncthreads();

    product_with_rows_t<D>(warp_q, t.k, scores);    // S = q k^T
    product_with_rows_t<D>(warp_dy, t.v, d_probs);  // dP = dy v^T
    __syncwarp();
    const float* score_row = scores + row * Layout<D>::s_ld;
    const float* d_prob_row = d_probs + row * Layout<D>::s_ld;
    __nv_bfloat16* d_score_row = probs + row * Layout<D>::p_ld;
#pragma unroll 8
    for (int c = half * kCols; c < (half + 1) * kCols; ++c) {
      const bool visible = t.keys_kept[c] != 0 && key0 + c < row_end;
      const float p = visible ? expf(score_row[c] * scale - lse) : 0.f;
      d_score_row[c] = __float2bfloat16_rn(scale * p * (d_prob_row[c] - delta));
    }
    __syncwarp();
    accumulate_product<D>(probs, t.k, dq_acc);  // dq += dS k
    __syncwarp();
  }
  store_rows<D>(dq_acc, scores, lane, dq, b, s.seq, s.q_heads, h, first_query + warp * kWarpRows);
}

}  // namespace
}  // namespace tfm::cuda
