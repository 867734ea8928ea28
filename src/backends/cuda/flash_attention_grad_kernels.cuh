// The flash-style attention backward kernels (see flash_attention.cu), in a header of their own
// so tests/cuda_emulation can run them on the CPU. After flash_attention_kernel<.., kStats> (or,
// from what the forward pass saved, flash_attention_delta_kernel) has written each query row's
// log-sum-exp and delta = dy · out, the probabilities of any tile are
// P = exp(scale * q·k - lse) with no pass over the row, and dS = scale * P * (dy·v - delta).
// One kernel walks the query tiles for a tile of keys (dk = dS^T q, dv = P^T dy, summed over the
// group's query heads), the other the key tiles for a tile of queries (dq = dS k, from the dS the
// first saved where the scratch allows, else from the products run again), so that each
// gradient is one block's sum in a fixed order: the same bits every run. As in the forward pass,
// every product is mma.sync (warp_mma.cuh) on fragments in registers: a warp holds its 16 rows'
// operands and gradients, takes the other side 16 rows at a time, and turns the scores'
// accumulators into the next product's left-hand fragments without a trip through shared memory.
#pragma once

#include "backends/cuda/flash_attention_kernel.cuh"

namespace tfm::cuda {
namespace {

// A warp's 16 rows of two [B, n, heads, D] tensors (rows first .. first + 15 of the block's tile
// of rows first .., those past n or left out by a mask, the batch row's [n], zeros) as left-hand
// fragments, through the tiles of a stage: the block's first use of them.
template <int D>
__device__ void warp_fragments(const __nv_bfloat16* a_src, const __nv_bfloat16* b_src, int64_t b,
                               int64_t n, int64_t heads, int64_t head, int64_t first,
                               const int32_t* mask, const StageTiles<D>& tiles,
                               uint32_t (&a)[D / 16][4], uint32_t (&b_frag)[D / 16][4]) {
  stage_rows<D>(a_src, b, n, heads, head, first, tiles.rows_a);
  stage_rows<D>(b_src, b, n, heads, head, first, tiles.rows_b);
  if (mask != nullptr) stage_ints(mask + b * n + first, n - first, tiles.ints);
  commit_copies();
  wait_copies<0>();
  if (mask != nullptr) {
    clear_masked_rows<D>(tiles.ints, tiles.rows_a, tiles.rows_b);  // after a barrier
  } else {
    __syncthreads();
  }
  const int warp_first = static_cast<int>(threadIdx.x / 32) * kWarpRows;
  row_fragments<D>(tiles.rows_a, warp_first, a);
  row_fragments<D>(tiles.rows_b, warp_first, b_frag);
}

// The first query tile from `from` on whose queries see a key before key_end (tile_key_ends:
// keys_seen_by's, written by the statistics pass), or -1: a warp checks 32 tiles a load.
__device__ inline int64_t first_tile_seeing(const int32_t* tile_key_ends, int64_t tiles,
                                            int64_t from, int64_t key0) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t base = from; base < tiles; base += 32) {
    const bool sees = base + lane < tiles && tile_key_ends[base + lane] > key0;
    const unsigned hits = __ballot_sync(0xffffffffu, sees);
    if (hits != 0) return base + __ffs(static_cast<int>(hits)) - 1;
  }
  return -1;
}

// Writes a warp's accumulated [16, D] rows (rows g and g + 8 of the lane's fragments) to rows
// first .. first + 15 of one head of a [B, n, heads, D] tensor, skipping rows past n: in bf16, as
// torch's gradients of autocast's attention are, each f32 sum rounded once.
template <int D>
__device__ void store_fragments(const float (&acc)[D / 8][4], __nv_bfloat16* dst, int64_t b,
                                int64_t n, int64_t heads, int64_t head, int64_t first) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = first + g + 8 * r;
    if (j >= n) continue;
    __nv_bfloat16* row = dst + ((b * n + j) * heads + head) * D + 2 * t;
#pragma unroll
    for (int db = 0; db < D / 8; ++db) {
      row[db * 8] = narrow<__nv_bfloat16>(acc[db][2 * r]);
      row[db * 8 + 1] = narrow<__nv_bfloat16>(acc[db][2 * r + 1]);
    }
  }
}

// A warp's 16 rows against 16 others (rows first .. first + 15 of two tiles): the scores
// s = a · a_rows^T and the probabilities' gradients d = b · b_rows^T, each as two [16, 8]
// accumulator blocks side by side.
template <int D>
__device__ __forceinline__ void scores_and_grads(const uint32_t (&a)[D / 16][4],
                                                 const __nv_bfloat16* a_rows,
                                                 const uint32_t (&b)[D / 16][4],
                                                 const __nv_bfloat16* b_rows, int first,
                                                 float (&scores)[2][4], float (&grads)[2][4]) {
#pragma unroll
  for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) scores[nb][e] = grads[nb][e] = 0.f;
  }
  times_rows_t<D>(a, a_rows, first, scores[0], scores[1]);
  times_rows_t<D>(b, b_rows, first, grads[0], grads[1]);
}

// f(block, element, r, c) for each of the lane's elements of two [16, 8] blocks side by side:
// row g + 8 r of the warp's rows, column c of the tile (first .. first + 15).
template <typename F>
__device__ __forceinline__ void for_each_element(int first, F f) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) f(nb, e, e / 2, first + nb * 8 + 2 * t + e % 2);
  }
}

// The scores' gradients dS that the dk/dv kernel may save for flash_attention_dq_from_ds_kernel,
// so that dq = dS k is one product instead of three (S and dP again, then dS k): per batch row of
// the launch, query head, query tile and key tile, in that order, a tile of kScoreGradTileBytes
// made of 16 blocks of [16 queries, 16 keys]. Block 4 w + c holds the queries of the dq kernel's
// warp w by keys 16 c .. 16 c + 15 as the left-hand fragments of its lanes, 16 bytes each in lane
// order: one 16-byte load a lane reads a block, and one 16-byte store a lane writes it.
__host__ __device__ inline int64_t score_grad_tiles_per_row(const AttentionShape& s) {
  return s.q_heads * query_tile_count(s) * key_tile_count(s);
}

template <typename Bf16>  // __nv_bfloat16, const or not
__device__ inline Bf16* score_grad_tile(Bf16* tiles, const AttentionShape& s, int64_t row,
                                        int64_t h, int64_t query_tile, int64_t key_tile) {
  const int64_t index =
      ((row * s.q_heads + h) * query_tile_count(s) + query_tile) * key_tile_count(s) + key_tile;
  return tiles + index * static_cast<int64_t>(kScoreGradTileBytes / 2);
}

// Saves a dk/dv warp's dS^T fragments (its 16 keys, chunk `warp` of the key tile, by queries
// 16 c .. 16 c + 15 of the query tile) as block 4 c + warp of the tile: each 8 x 8 block
// transposed, and the two off the diagonal swapped, make dS's fragments.
__device__ __forceinline__ void save_score_grads(const uint32_t (&ds_t)[4], __nv_bfloat16* tile,
                                                 int c, int warp) {
  const uint4 ds{transposed_matrix(ds_t[0]), transposed_matrix(ds_t[2]), transposed_matrix(ds_t[1]),
                 transposed_matrix(ds_t[3])};
  reinterpret_cast<uint4*>(tile)[(4 * c + warp) * 32 + threadIdx.x % 32] = ds;
}

// The backward statistics (RowStatsTarget) from what the forward pass left (its output, and each
// row's log-sum-exp in row_lse) instead of its products run again: delta = dy · out beside each
// row's lse, a warp per 16 rows, and each query tile's end of keys. Rows past seq are left alone.
template <int D, typename Out>
__global__ void __launch_bounds__(kThreads)
    flash_attention_delta_kernel(const __nv_bfloat16* __restrict__ dy, const Out* __restrict__ out,
                                 const float* __restrict__ row_lse,
                                 const int32_t* __restrict__ slots, AttentionShape s,
                                 float* __restrict__ stats, int32_t* __restrict__ tile_key_ends) {
  const int64_t first_query = int64_t{blockIdx.x} * kBlockRows, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (h == 0 && b == 0) {
    const int64_t keys_end = keys_seen_by(slots, s, first_query);
    if (threadIdx.x == 0) tile_key_ends[blockIdx.x] = static_cast<int32_t>(keys_end);
  }
  for (int r = 0; r < kWarpRows; ++r) {
    const int64_t i = first_query + warp * kWarpRows + r;
    if (i >= s.seq) break;
    const int64_t row = (b * s.seq + i) * s.q_heads + h;
    float dot = 0.f;
#pragma unroll
    for (int d = lane; d < D; d += 32) dot += widen(dy[row * D + d]) * widen(out[row * D + d]);
    dot = warp_sum(dot);
    if (lane == 0) stats[2 * row] = row_lse[row], stats[2 * row + 1] = dot;
  }
}

// dk and dv for a tile of 64 keys of one KV head (16 per warp) of batch row first_row + z: over
// every query head of its group and every query tile that sees one of the keys, the next (query
// tile, head)'s q, dy, slots and statistics copied in while this one's are used. Per 16 queries,
// S^T = k q^T and dP^T = v dy^T give P^T and dS^T, then dv += P^T dy and dk += dS^T q; with
// score_grads, dS is saved there too (score_grad_tile, launch row z).
template <int D>
__global__ void __launch_bounds__(kThreads) flash_attention_dkdv_kernel(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
    const __nv_bfloat16* __restrict__ v, const int32_t* __restrict__ mask,
    const int32_t* __restrict__ slots, const __nv_bfloat16* __restrict__ dy,
    const float* __restrict__ stats, const int32_t* __restrict__ tile_key_ends, AttentionShape s,
    float scale, int64_t first_row, __nv_bfloat16* __restrict__ dk, __nv_bfloat16* __restrict__ dv,
    __nv_bfloat16* __restrict__ score_grads) {
  TFM_DYNAMIC_SHARED_MEMORY(smem);
  const int64_t key0 = int64_t{blockIdx.x} * kTileKeys, kvh = blockIdx.y,
                b = first_row + blockIdx.z;
  const int64_t group = s.q_heads / s.kv_heads;
  const int64_t query_tiles = query_tile_count(s);
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
  const float scale_log2 = scale * kLog2e;  // the scores in base 2, as the forward pass takes them

  uint32_t ka[D / 16][4], va[D / 16][4];
  warp_fragments<D>(k, v, b, s.cache_len, s.kv_heads, kvh, key0, mask, StageTiles<D>(smem, 0), ka,
                    va);
  int64_t key[2];
  bool kept[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    key[r] = key0 + warp * kWarpRows + g + 8 * r;
    kept[r] = key[r] < s.cache_len && mask[b * s.cache_len + key[r]] != 0;
  }

  // Items: query tile * group + (head - kvh * group), over the query tiles that see a key of the
  // tile (causal: a tile whose queries all sit before the keys sees none).
  const auto next = [&](int64_t item) -> int64_t {
    if ((item + 1) % group != 0) return item + 1;
    const int64_t tile = first_tile_seeing(tile_key_ends, query_tiles, item / group + 1, key0);
    return tile < 0 ? -1 : tile * group;
  };
  const int64_t first_tile = first_tile_seeing(tile_key_ends, query_tiles, 0, key0);
  float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};
  double_buffered(
      first_tile < 0 ? -1 : first_tile * group, next,
      [&](int64_t item, int buffer) {
        const StageTiles<D> tiles(smem, buffer);
        const int64_t first_query = item / group * kBlockRows, h = kvh * group + item % group;
        stage_rows<D>(q, b, s.seq, s.q_heads, h, first_query, tiles.rows_a);
        stage_rows<D>(dy, b, s.seq, s.q_heads, h, first_query, tiles.rows_b);
        stage_ints(slots + first_query, s.seq - first_query, tiles.ints);
        const int c = static_cast<int>(threadIdx.x);
        if (c < kBlockRows) {
          const bool exists = first_query + c < s.seq;
          const float* row = stats + 2 * ((b * s.seq + first_query + c) * s.q_heads + h);
          copy_async<8>(tiles.row_stats + 2 * c, exists ? row : stats, exists);
        }
      },
      [&](int64_t item, int buffer) {
        __syncthreads();  // every thread's copies of the item have landed
        const StageTiles<D> tiles(smem, buffer);
        const int64_t first_query = item / group * kBlockRows;
        __nv_bfloat16* saved = score_grads == nullptr ? nullptr
                                                      : score_grad_tile(score_grads, s, blockIdx.z,
                                                                        kvh * group + item % group,
                                                                        item / group, blockIdx.x);
#pragma unroll 1
        for (int first = 0; first < kBlockRows; first += 16) {
          float p[2][4], ds[2][4];  // S^T, dP^T, then P^T, dS^T: the warp's keys by 16 queries
          scores_and_grads<D>(ka, tiles.rows_a, va, tiles.rows_b, first, p, ds);
          for_each_element(first, [&](int nb, int e, int r, int c) {
            const bool visible = kept[r] && first_query + c < s.seq && key[r] <= tiles.ints[c];
            const float prob =
                visible ? exp2f(p[nb][e] * scale_log2 - tiles.row_stats[2 * c] * kLog2e) : 0.f;
            p[nb][e] = prob;
            ds[nb][e] = scale * prob * (ds[nb][e] - tiles.row_stats[2 * c + 1]);
          });
          uint32_t pa[4], dsa[4];
          as_left_fragment(p[0], p[1], pa);
          as_left_fragment(ds[0], ds[1], dsa);
          if (saved != nullptr) save_score_grads(dsa, saved, first / 16, warp);
          times_rows<D>(pa, tiles.rows_b, first, dv_acc);
          times_rows<D>(dsa, tiles.rows_a, first, dk_acc);
        }
      });
  const int64_t first_key = key0 + warp * kWarpRows;
  store_fragments<D>(dk_acc, dk, b, s.cache_len, s.kv_heads, kvh, first_key);
  store_fragments<D>(dv_acc, dv, b, s.cache_len, s.kv_heads, kvh, first_key);
}

// dq for a tile of 64 queries of one head (16 per warp): over the key tiles they see, the next
// tile's keys and values copied in while this one's are used. Per 16 keys, S = q k^T and
// dP = dy v^T give dS, then dq += dS k.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_attention_dq_kernel(const __nv_bfloat16* __restrict__ q,
                              const __nv_bfloat16* __restrict__ k,
                              const __nv_bfloat16* __restrict__ v, const int32_t* __restrict__ mask,
                              const int32_t* __restrict__ slots,
                              const __nv_bfloat16* __restrict__ dy, const float* __restrict__ stats,
                              const int32_t* __restrict__ tile_key_ends, AttentionShape s,
                              float scale, __nv_bfloat16* __restrict__ dq) {
  TFM_DYNAMIC_SHARED_MEMORY(smem);
  const int tile =
      latest_first(static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));  // as forward
  const int64_t first_query = int64_t{tile} * kBlockRows, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = h / (s.q_heads / s.kv_heads);
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
  const float scale_log2 = scale * kLog2e;  // the scores in base 2, as the forward pass takes them

  uint32_t qa[D / 16][4], dya[D / 16][4];
  warp_fragments<D>(q, dy, b, s.seq, s.q_heads, h, first_query, nullptr, StageTiles<D>(smem, 0), qa,
                    dya);
  int64_t row_end[2];  // the keys each row sees end here (0 past the sequence)
  float lse_log2[2], delta[2];  // the rows' log-sum-exp in base 2, as the scores are taken
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = first_query + warp * kWarpRows + g + 8 * r;
    const bool exists = i < s.seq;
    row_end[r] = exists ? min(static_cast<int64_t>(slots[i]) + 1, s.cache_len) : 0;
    lse_log2[r] = exists ? stats[2 * ((b * s.seq + i) * s.q_heads + h)] * kLog2e : 0.f;
    delta[r] = exists ? stats[2 * ((b * s.seq + i) * s.q_heads + h) + 1] : 0.f;
  }
  const int64_t keys_end = tile_key_ends[tile];

  float dq_acc[D / 8][4] = {};
  // Keys in rows_a, values in rows_b, whether each key is kept in ints.
  over_key_tiles<D>(
      smem, k, v, mask, s, b, kvh, 0, keys_end, [&](int64_t key0, const StageTiles<D>& tiles) {
#pragma unroll 1
        for (int first = 0; first < kTileKeys; first += 16) {
          float sc[2][4], ds[2][4];  // S and dP, then dS: the warp's queries by 16 keys
          scores_and_grads<D>(qa, tiles.rows_a, dya, tiles.rows_b, first, sc, ds);
          for_each_element(first, [&](int nb, int e, int r, int c) {
            const bool visible = tiles.ints[c] != 0 && key0 + c < row_end[r];
            const float prob = visible ? exp2f(sc[nb][e] * scale_log2 - lse_log2[r]) : 0.f;
            ds[nb][e] = scale * prob * (ds[nb][e] - delta[r]);
          });
          uint32_t dsa[4];
          as_left_fragment(ds[0], ds[1], dsa);
          times_rows<D>(dsa, tiles.rows_a, first, dq_acc);
        }
      });
  store_fragments<D>(dq_acc, dq, b, s.seq, s.q_heads, h, first_query + warp * kWarpRows);
}

// dq for a tile of 64 queries of one head of batch row first_row + z from the scores' gradients
// the dk/dv kernel saved (score_grad_tile, launch row z): over the key tiles the queries see, the
// next tile's keys and dS copied in while this one's are used, dq += dS k per 16 keys, summed in
// the order flash_attention_dq_kernel sums them.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_attention_dq_from_ds_kernel(const __nv_bfloat16* __restrict__ k,
                                      const int32_t* __restrict__ mask,
                                      const int32_t* __restrict__ tile_key_ends,
                                      const __nv_bfloat16* __restrict__ score_grads,
                                      AttentionShape s, int64_t first_row,
                                      __nv_bfloat16* __restrict__ dq) {
  TFM_DYNAMIC_SHARED_MEMORY(smem);
  const int tile =
      latest_first(static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));  // as forward
  const int64_t first_query = int64_t{tile} * kBlockRows, h = blockIdx.y;
  const int64_t b = first_row + blockIdx.z, kvh = h / (s.q_heads / s.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t keys_end = tile_key_ends[tile];

  float dq_acc[D / 8][4] = {};
  // Keys in rows_a, their dS blocks in rows_b, whether each key is kept in ints.
  over_key_tiles<D>(
      smem, k, nullptr, mask, s, b, kvh, 0, keys_end,
      [&](int64_t, const StageTiles<D>& tiles) {
        const auto* blocks = reinterpret_cast<const uint4*>(tiles.rows_b);
#pragma unroll
        for (int c = 0; c < kTileKeys / 16; ++c) {
          const uint4 block = blocks[(4 * warp + c) * 32 + lane];
          const uint32_t dsa[4] = {block.x, block.y, block.z, block.w};
          times_rows<D>(dsa, tiles.rows_a, c * 16, dq_acc);
        }
      },
      [&](int64_t key0, const StageTiles<D>& tiles) {
        const __nv_bfloat16* saved =
            score_grad_tile(score_grads, s, blockIdx.z, h, tile, key0 / kTileKeys);
        constexpr int kPieces = static_cast<int>(kScoreGradTileBytes / 16);
        static_assert(kPieces % kThreads == 0);
#pragma unroll
        for (int i = 0; i < kPieces / kThreads; ++i) {
          const int e = i * kThreads + static_cast<int>(threadIdx.x);
          copy_async<16>(tiles.rows_b + 8 * e, saved + 8 * e, true);
        }
      });
  store_fragments<D>(dq_acc, dq, b, s.seq, s.q_heads, h, first_query + warp * kWarpRows);
}

}  // namespace
}  // namespace tfm::cuda
