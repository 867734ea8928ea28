// The flash-style attention forward kernel (see flash_attention.cu), in a header of its own so
// tests/cuda_emulation can run it on the CPU.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "backends/cuda/chunk_merge.cuh"
#include "backends/cuda/flash_attention_tiles.cuh"

namespace tfm::cuda {
namespace {

// The forward kernel's warps take 32 queries each, two fragments' rows: each key or value
// fragment read from shared memory then serves two products, as FlashAttention-2's 128-query
// tiles do, where shared memory's bandwidth would otherwise bound the tensor cores.
constexpr int kQueryGroups = 2;
constexpr int kForwardRows = kWarps * kQueryGroups * kWarpRows;
static_assert(kForwardRows % kBlockRows == 0);
__host__ __device__ inline int64_t forward_query_tile_count(const AttentionShape& s) {
  return (s.seq + kForwardRows - 1) / kForwardRows;
}

// The forward kernel's shared memory: the stages, then its queries (bf16) for the whole walk.
template <int D>
struct ForwardLayout {
  static constexpr size_t queries = StageLayout<D>::total;
  static constexpr size_t total = queries + size_t{kForwardRows} * TileLayout<D>::ld * 2;
};
// Two forward blocks share a multiprocessor (227 KB of shared memory a block on sm_90).
static_assert(2 * ForwardLayout<128>::total <= 227 * 1024);

// What the backward pass needs of each query row (row = (b * seq + i) * q_heads + h):
// stats[2 * row] = log-sum-exp of its scaled scores, stats[2 * row + 1] = delta = dy · out
// (zeros for a query that sees no key); and of each query tile, where the keys it sees end
// (tile_key_ends, keys_seen_by). Written by the kernel with kStats; without, where row_lse is
// set, the forward pass leaves each row's log-sum-exp there beside its output (for a gradient
// that then needs no statistics pass: flash_attention_delta_kernel).
struct RowStatsTarget {
  const __nv_bfloat16* dy = nullptr;
  float* stats = nullptr;
  int32_t* tile_key_ends = nullptr;
  float* row_lse = nullptr;
};

// A row's (natural) log-sum-exp from its running max in base-2 units and its sum of exponentials
// (0 where it saw no key).
__device__ __forceinline__ float log_sum_exp(float row_max, float row_sum) {
  return row_sum > 0.f ? (row_max + log2f(row_sum)) * kLn2 : 0.f;
}

// A launch's key splits (count 1: none). Block x = query tile * count + split takes its share of
// the key tiles its queries see, so a short prefill chunk still fills the GPU; with more than one,
// each block leaves its rows' partial results (chunk_merge.cuh) and the tile's last block to
// finish merges them.
struct KeySplits {
  int count = 1;
  float* partials = nullptr;     // [B * S * Hq rows][count][D + 2]
  unsigned* arrivals = nullptr;  // one per (batch, head, query tile): zero before, left zero
};

// A block's rows' partial results (chunk_merge.cuh) in a launch with key splits, one fragment's
// rows of a warp (g and g + 8 of the lane's), unnormalized.
template <int D>
__device__ void leave_partials(const float (&o)[D / 8][4], const float (&row_max)[2],
                               const float (&row_sum)[2], const int64_t (&query)[2],
                               const AttentionShape& s, int64_t h, int64_t b, int split,
                               const KeySplits& splits) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (query[r] >= s.seq) continue;
    float* dst =
        partial_at(splits.partials, (b * s.seq + query[r]) * s.q_heads + h, split, splits.count, D);
    if (t == 0) dst[0] = row_max[r] * kLn2, dst[1] = row_sum[r];  // merge_chunks: natural units
#pragma unroll
    for (int db = 0; db < D / 8; ++db) {
      dst[2 + db * 8 + 2 * t] = o[db][2 * r];
      dst[2 + db * 8 + 2 * t + 1] = o[db][2 * r + 1];
    }
  }
}

// The end of a block of a launch with key splits, once its partial results are written: the
// tile's last block to arrive merges every split's rows into out, each warp its own rows
// (first_query .. first_query + rows - 1), and leaves the tile's counter at zero.
template <int D, typename Out>
__device__ void merge_if_last(int64_t first_query, int rows, const AttentionShape& s, int64_t h,
                              int64_t b, int64_t tile_id, const KeySplits& splits, Out* out) {
  // Every thread's partial results are visible device-wide before thread 0 counts the block.
  __threadfence();
  __syncthreads();
  __shared__ unsigned arrived;
  if (threadIdx.x == 0) arrived = atomicAdd(splits.arrivals + tile_id, 1u);
  __syncthreads();
  if (arrived != static_cast<unsigned>(splits.count - 1)) return;
  __threadfence();
  const int lane = threadIdx.x % 32;
  for (int r = 0; r < rows && first_query + r < s.seq; ++r) {
    const int64_t row = (b * s.seq + first_query + r) * s.q_heads + h;
    merge_chunks<(D >= 32 ? D / 32 : 1)>(partial_at(splits.partials, row, 0, splits.count, D),
                                         splits.count, D, out + row * D, lane);
  }
  if (threadIdx.x == 0) splits.arrivals[tile_id] = 0;
}

// Queries first .. first + kForwardRows - 1 of head h of batch row b into the forward kernel's
// query tile, rounded to bf16 (the products' operands); rows past seq are zeros.
template <int D, typename Q>
__device__ void load_queries(const Q* q, const AttentionShape& s, int64_t b, int64_t h,
                             int64_t first, __nv_bfloat16* tile) {
  constexpr int kPieces = D / 8;  // 8 values a piece: 16 bytes of the tile
  for (int e = threadIdx.x; e < kForwardRows * kPieces; e += kThreads) {
    const int r = e / kPieces, part = e % kPieces;
    const int64_t i = first + r;
    uint4 piece{0, 0, 0, 0};
    if (i < s.seq) {
      const Q* src = q + ((b * s.seq + i) * s.q_heads + h) * D + part * 8;
      if constexpr (std::is_same_v<Q, float>) {
        const float4 lo = reinterpret_cast<const float4*>(src)[0];
        const float4 hi = reinterpret_cast<const float4*>(src)[1];
        piece = {bf16_pair(lo.x, lo.y), bf16_pair(lo.z, lo.w), bf16_pair(hi.x, hi.y),
                 bf16_pair(hi.z, hi.w)};
      } else {
        piece = *reinterpret_cast<const uint4*>(src);
      }
    }
    *reinterpret_cast<uint4*>(tile + r * TileLayout<D>::ld + part * 8) = piece;
  }
}

// One key tile's scores of a warp's 16 queries (p: q·k, [16, 64] as 8 accumulator blocks) into
// their probabilities, with the rows' running max and sum and their output so far (o) rescaled.
// The softmax runs in base 2: a row's max in units of scale * log2(e). Keys a row cannot see
// score -inf; until a row has seen a key its max stays -inf and it gathers nothing.
template <int D>
__device__ __forceinline__ void online_softmax(float (&p)[kTileKeys / 8][4], int64_t key0,
                                               const int32_t (&row_end)[2], const int32_t* kept,
                                               float scale_log2, float (&row_max)[2],
                                               float (&row_sum)[2], float (&o)[D / 8][4]) {
  const int t = threadIdx.x % 4;
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nb = 0; nb < kTileKeys / 8; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e / 2, c = nb * 8 + 2 * t + e % 2;
      const bool visible = key0 + c < row_end[r] && kept[c] != 0;
      p[nb][e] = visible ? p[nb][e] * scale_log2 : -INFINITY;
      tile_max[r] = fmaxf(tile_max[r], p[nb][e]);
    }
  }
  float correction[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    const float max_new = fmaxf(row_max[r], tile_max[r]);
    correction[r] = max_new != -INFINITY ? exp2f(row_max[r] - max_new) : 1.f;
    row_max[r] = max_new;
    row_sum[r] *= correction[r];
  }
#pragma unroll
  for (int nb = 0; nb < kTileKeys / 8; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e / 2;
      p[nb][e] = row_max[r] != -INFINITY ? exp2f(p[nb][e] - row_max[r]) : 0.f;
      row_sum[r] += p[nb][e];
    }
  }
#pragma unroll
  for (int db = 0; db < D / 8; ++db) {
    o[db][0] *= correction[0], o[db][1] *= correction[0];
    o[db][2] *= correction[1], o[db][3] *= correction[1];
  }
}

// The scores of a warp's queries (its fragments' rows warp_first + 16 grp .. of the block's query
// tile) against a tile of keys, p[grp] = q k^T: each key fragment read serves both fragments' rows.
template <int D>
__device__ __forceinline__ void query_key_scores(const __nv_bfloat16* queries, int warp_first,
                                                 const __nv_bfloat16* keys,
                                                 float (&p)[kQueryGroups][kTileKeys / 8][4]) {
#pragma unroll
  for (int grp = 0; grp < kQueryGroups; ++grp) {
#pragma unroll
    for (int nb = 0; nb < kTileKeys / 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) p[grp][nb][e] = 0.f;
    }
  }
  // Two steps of d at a time, not all: unrolled whole, the walk's registers would spill.
#pragma unroll 2
  for (int kc = 0; kc < D / 16; ++kc) {
    uint32_t qa[kQueryGroups][4];
#pragma unroll
    for (int grp = 0; grp < kQueryGroups; ++grp) {
      load_matrices_x4<false>(qa[grp],
                              fragment_row<D>(queries, warp_first + grp * kWarpRows, kc * 16));
    }
#pragma unroll
    for (int nb = 0; nb < kTileKeys / 8; nb += 2) {
      uint32_t m[4];
      key_fragments<D>(keys, nb * 8, kc, m);
      const uint32_t b_low[2] = {m[0], m[1]}, b_high[2] = {m[2], m[3]};
#pragma unroll
      for (int grp = 0; grp < kQueryGroups; ++grp) {
        mma_16x8x16(p[grp][nb], qa[grp], b_low);
        mma_16x8x16(p[grp][nb + 1], qa[grp], b_high);
      }
    }
  }
}

// o[grp] += p[grp] v over a tile of values: P's fragments for keys 16 kc .. 16 kc + 15 are the
// probabilities' blocks 2 kc and 2 kc + 1, and each value fragment read serves both fragments'
// rows.
template <int D>
__device__ __forceinline__ void add_weighted_values(
    const float (&p)[kQueryGroups][kTileKeys / 8][4], const __nv_bfloat16* values,
    float (&o)[kQueryGroups][D / 8][4]) {
#pragma unroll
  for (int kc = 0; kc < kTileKeys / 16; ++kc) {
    uint32_t pa[kQueryGroups][4];
#pragma unroll
    for (int grp = 0; grp < kQueryGroups; ++grp) {
      as_left_fragment(p[grp][2 * kc], p[grp][2 * kc + 1], pa[grp]);
    }
#pragma unroll
    for (int db = 0; db < D / 8; db += 2) {
      uint32_t m[4];
      load_matrices_x4<true>(m, fragment_row<D>(values, kc * 16, db * 8));
      const uint32_t b_low[2] = {m[0], m[1]}, b_high[2] = {m[2], m[3]};
#pragma unroll
      for (int grp = 0; grp < kQueryGroups; ++grp) {
        mma_16x8x16(o[grp][db], pa[grp], b_low);
        mma_16x8x16(o[grp][db + 1], pa[grp], b_high);
      }
    }
  }
}

// The forward pass (q f32, or bf16 under autocast) writes out [B, S, Hq, D] (f32, or bf16 under
// autocast: graph::fold_casts), each value rounded once from f32, and where asked its rows'
// log-sum-exp; with kStats it writes the rows' backward statistics instead, and the key ends of
// the backward kernels' 64-query tiles. Flash-style on mma.sync (warp_mma.cuh): a block takes
// kForwardRows queries (rounded to bf16, in shared memory), each warp 32 of them as two
// fragments' rows, and keeps a tile's scores and its share of the output in registers; the
// probabilities go from the scores' fragments straight into the P·V product. A lane holds rows
// g = lane / 4 and g + 8 of each of the warp's fragments, columns 2t, 2t + 1 (t = lane % 4) of
// every 8; a row's max and sum are gathered over the 4 lanes that share it.
template <int D, typename Q, bool kStats, typename Out = float>
__global__ void __launch_bounds__(kThreads)
    flash_attention_kernel(const Q* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                           const __nv_bfloat16* __restrict__ v, const int32_t* __restrict__ mask,
                           const int32_t* __restrict__ slots, AttentionShape s, float scale,
                           Out* __restrict__ out, RowStatsTarget stats, KeySplits splits) {
  constexpr int kKeyBlocks = kTileKeys / 8, kDimBlocks = D / 8, kGroups = kQueryGroups;
  TFM_DYNAMIC_SHARED_MEMORY(smem);

  // The last query tiles, which see the most keys, first: blocks start in index order, so the
  // launch ends on short ones.
  const int tile = latest_first(static_cast<int>(blockIdx.x) / splits.count,
                                static_cast<int>(gridDim.x) / splits.count);
  const int split = static_cast<int>(blockIdx.x) % splits.count;
  const int64_t first_query = int64_t{tile} * kForwardRows, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = h / (s.q_heads / s.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int warp_first = warp * kGroups * kWarpRows;  // the warp's first row of the block's tile
  // Row r of fragment grp of the warp's: query first_query + query_at(grp, r).
  const auto query_at = [&](int grp, int r) { return warp_first + grp * kWarpRows + g + 8 * r; };
  // Where the keys each row sees end, from key0 of the walk's tile (0 past the sequence): in
  // 32 bits, as the slots are, so that the walk keeps fewer registers.
  int32_t row_end[kGroups][2];
#pragma unroll
  for (int grp = 0; grp < kGroups; ++grp) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = first_query + query_at(grp, r);
      row_end[grp][r] =
          i < s.seq ? static_cast<int32_t>(min(static_cast<int64_t>(slots[i]) + 1, s.cache_len))
                    : 0;
    }
  }
  __nv_bfloat16* queries = reinterpret_cast<__nv_bfloat16*>(smem + ForwardLayout<D>::queries);
  load_queries<D>(q, s, b, h, first_query, queries);  // read after the walk's first barrier
  const float scale_log2 = scale * kLog2e;
  // This split's key tiles, of those the block's queries see.
  const int64_t keys_end = keys_seen_by(slots, s, first_query, kForwardRows);
  if constexpr (kStats) {
#pragma unroll
    for (int part = 0; part < kForwardRows / kBlockRows; ++part) {
      const int64_t grad_tile = int64_t{tile} * (kForwardRows / kBlockRows) + part;
      const int64_t end = keys_seen_by(slots, s, grad_tile * kBlockRows);
      if (h == 0 && b == 0 && threadIdx.x == 0 && grad_tile < query_tile_count(s)) {
        stats.tile_key_ends[grad_tile] = static_cast<int32_t>(end);
      }
    }
  }
  const int64_t tiles_per_split =
      ((keys_end + kTileKeys - 1) / kTileKeys + splits.count - 1) / splits.count;
  const int64_t keys_first = split * tiles_per_split * kTileKeys;
  const int64_t keys_stop = min(keys_end, keys_first + tiles_per_split * kTileKeys);

  float o[kGroups][kDimBlocks][4] = {};
  // The running max and (this lane's part of) the sum of each row.
  float row_max[kGroups][2], row_sum[kGroups][2];
#pragma unroll
  for (int grp = 0; grp < kGroups; ++grp) {
    row_max[grp][0] = row_max[grp][1] = -INFINITY;
    row_sum[grp][0] = row_sum[grp][1] = 0.f;
  }
  // Per key tile: keys in rows_a, values in rows_b, whether each key is kept in ints.
  const auto add_tile = [&](int64_t key0, const StageTiles<D>& tiles) {
    float p[kGroups][kKeyBlocks][4];  // S = q k^T, then the probabilities
    query_key_scores<D>(queries, warp_first, tiles.rows_a, p);
#pragma unroll
    for (int grp = 0; grp < kGroups; ++grp) {
      online_softmax<D>(p[grp], key0, row_end[grp], tiles.ints, scale_log2, row_max[grp],
                        row_sum[grp], o[grp]);
    }
    add_weighted_values<D>(p, tiles.rows_b, o);
  };
  over_key_tiles<D>(smem, k, v, mask, s, b, kvh, keys_first, keys_stop, add_tile);

#pragma unroll
  for (int grp = 0; grp < kGroups; ++grp) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_sum[grp][r] += __shfl_xor_sync(0xffffffffu, row_sum[grp][r], 1);
      row_sum[grp][r] += __shfl_xor_sync(0xffffffffu, row_sum[grp][r], 2);
    }
  }
  if (splits.count > 1) {
#pragma unroll
    for (int grp = 0; grp < kGroups; ++grp) {
      const int64_t query[2] = {first_query + query_at(grp, 0), first_query + query_at(grp, 1)};
      leave_partials<D>(o[grp], row_max[grp], row_sum[grp], query, s, h, b, split, splits);
    }
    const int64_t query_tiles = gridDim.x / splits.count;
    const int64_t tile_id = (b * s.q_heads + h) * query_tiles + tile;
    merge_if_last<D>(first_query + warp_first, kGroups * kWarpRows, s, h, b, tile_id, splits, out);
    return;
  }
#pragma unroll
  for (int grp = 0; grp < kGroups; ++grp) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = first_query + query_at(grp, r);
      const float sum = row_sum[grp][r];
      const float inv = sum > 0.f ? 1.f / sum : 0.f;  // no key seen: zeros, as on the CPU
      const int64_t at = ((b * s.seq + i) * s.q_heads + h) * D + 2 * t;
      if constexpr (kStats) {
        float dot = 0.f;
        if (i < s.seq) {
#pragma unroll
          for (int db = 0; db < kDimBlocks; ++db) {
            dot += widen(stats.dy[at + db * 8]) * (o[grp][db][2 * r] * inv) +
                   widen(stats.dy[at + db * 8 + 1]) * (o[grp][db][2 * r + 1] * inv);
          }
        }
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);  // every lane, before any leaves
        dot += __shfl_xor_sync(0xffffffffu, dot, 2);
        if (i < s.seq && t == 0) {
          float* row_stats = stats.stats + 2 * ((b * s.seq + i) * s.q_heads + h);
          row_stats[0] = log_sum_exp(row_max[grp][r], sum);
          row_stats[1] = dot;
        }
      } else if (i < s.seq) {
#pragma unroll
        for (int db = 0; db < kDimBlocks; ++db) {
          out[at + db * 8] = narrow<Out>(o[grp][db][2 * r] * inv);
          out[at + db * 8 + 1] = narrow<Out>(o[grp][db][2 * r + 1] * inv);
        }
        if (stats.row_lse != nullptr && t == 0) {
          stats.row_lse[(b * s.seq + i) * s.q_heads + h] = log_sum_exp(row_max[grp][r], sum);
        }
      }
    }
  }
}

}  // namespace
}  // namespace tfm::cuda
