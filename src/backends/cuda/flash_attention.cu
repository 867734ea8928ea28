// Attention flash-style on tensor cores: prefill over a bf16 cache, and attention under bf16
// autocast in training, forward and backward. A forward block takes 128 queries of one head (32
// per warp; the backward kernels' blocks 64 queries or keys, 16 per warp) and walks the keys in
// tiles of 64, each tile's products on tensor cores (bf16 in, f32 accumulation; mma.sync on
// fragments in registers, the tile's read from shared memory by ldmatrix) and the softmax kept
// online per query row: scores never reach global memory. The next tile is copied into shared
// memory (cp.async) while the warps compute on this one.
#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/flash_attention_grad_kernels.cuh"
#include "backends/cuda/float_types.cuh"
#include "backends/cuda/shared_memory_limit.h"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

// The grid of a launch over query tiles of `count` tiles a head.
dim3 query_tiles(const AttentionShape& s, int64_t count) {
  return dim3(static_cast<unsigned>(count), static_cast<unsigned>(s.q_heads),
              static_cast<unsigned>(s.batch));
}
dim3 query_tiles(const AttentionShape& s) { return query_tiles(s, query_tile_count(s)); }
dim3 forward_query_tiles(const AttentionShape& s) {
  return query_tiles(s, forward_query_tile_count(s));
}

// Key splits for a launch whose query tiles alone would leave most of an H200's 132
// multiprocessors idle (a prefill chunk of a few hundred tokens): about two blocks on each, at
// most one split per key tile of the cache.
constexpr int64_t kWantedBlocks = 264;

int key_split_count(const AttentionShape& s) {
  const dim3 tiles = forward_query_tiles(s);
  const int64_t blocks = std::max<int64_t>(1, int64_t{tiles.x} * tiles.y * tiles.z);
  const int64_t key_tiles = std::max<int64_t>(1, key_tile_count(s));
  return static_cast<int>(std::clamp<int64_t>((kWantedBlocks + blocks - 1) / blocks, 1, key_tiles));
}

template <int D, typename Q, bool kStats, typename Out = float>
void launch_forward(const void* q, const void* k, const void* v, const int32_t* mask,
                    const int32_t* slots, const AttentionShape& s, float scale, Out* out,
                    RowStatsTarget stats, KeySplits splits, cudaStream_t stream) {
  if ((kStats || stats.row_lse != nullptr) && splits.count != 1) {
    throw Error("[cuda attention] the rows' statistics need the keys in one split");
  }
  constexpr size_t bytes = ForwardLayout<D>::total;
  allow_shared_memory(reinterpret_cast<const void*>(flash_attention_kernel<D, Q, kStats, Out>),
                      bytes, "flash_attention");
  dim3 grid = forward_query_tiles(s);
  grid.x *= static_cast<unsigned>(splits.count);
  flash_attention_kernel<D, Q, kStats, Out><<<grid, kThreads, bytes, stream>>>(
      static_cast<const Q*>(q), static_cast<const __nv_bfloat16*>(k),
      static_cast<const __nv_bfloat16*>(v), mask, slots, s, scale, out, stats, splits);
}

// The rows' backward statistics and the query tiles' key ends: from what the forward pass saved
// where it did, else by its products run again.
template <int D>
void launch_row_stats(const void* q, const void* k, const void* v, const int32_t* mask,
                      const int32_t* slots, const __nv_bfloat16* dy, const AttentionShape& s,
                      float scale, const SavedForward& saved, float* stats, int32_t* tile_key_ends,
                      cudaStream_t stream) {
  if (saved.out == nullptr) {
    launch_forward<D, __nv_bfloat16, true>(
        q, k, v, mask, slots, s, scale, static_cast<float*>(nullptr),
        RowStatsTarget{dy, stats, tile_key_ends, nullptr}, KeySplits{}, stream);
    return;
  }
  with_float_type(saved.out_dtype, "flash_attention_grad", [&](auto out_type) {
    using Out = typename decltype(out_type)::type;
    flash_attention_delta_kernel<D, Out><<<query_tiles(s), kThreads, 0, stream>>>(
        dy, static_cast<const Out*>(saved.out), saved.row_lse, slots, s, stats, tile_key_ends);
  });
}

size_t score_grad_row_bytes(const AttentionShape& s) {
  return static_cast<size_t>(score_grad_tiles_per_row(s)) * kScoreGradTileBytes;
}

// Batch rows a launch saves the scores' gradients of (score_grad_tile) for the dq kernel, in
// `budget` bytes of scratch (KernelOptions::saved_score_grad_mib): batch rows beyond it run in
// turns, and a shape whose one row would pass it takes the dq kernel that runs the products again
// instead (0 rows: none saved, or nothing to save).
int64_t score_grad_rows(const AttentionShape& s, size_t budget) {
  const size_t row_bytes = score_grad_row_bytes(s);
  if (row_bytes == 0) return 0;
  return std::min<int64_t>(s.batch, static_cast<int64_t>(budget / row_bytes));
}

template <int D>
void launch_backward(const void* q, const void* k, const void* v, const int32_t* mask,
                     const int32_t* slots, const __nv_bfloat16* dy, const AttentionShape& s,
                     float scale, const SavedForward& saved, size_t budget, __nv_bfloat16* grads,
                     float* stats, int32_t* tile_key_ends, __nv_bfloat16* score_grads,
                     cudaStream_t stream) {
  launch_row_stats<D>(q, k, v, mask, slots, dy, s, scale, saved, stats, tile_key_ends, stream);
  constexpr size_t bytes = StageLayout<D>::total;
  const auto* q16 = static_cast<const __nv_bfloat16*>(q);
  const auto* k16 = static_cast<const __nv_bfloat16*>(k);
  const auto* v16 = static_cast<const __nv_bfloat16*>(v);
  __nv_bfloat16* dk = grads + s.batch * s.seq * s.q_heads * D;
  __nv_bfloat16* dv = dk + s.batch * s.cache_len * s.kv_heads * D;
  allow_shared_memory(reinterpret_cast<const void*>(flash_attention_dkdv_kernel<D>), bytes,
                      "flash_attention_dkdv");
  const auto dkdv = [&](int64_t first_row, int64_t rows, __nv_bfloat16* saved_grads) {
    const dim3 key_tiles(static_cast<unsigned>(key_tile_count(s)),
                         static_cast<unsigned>(s.kv_heads), static_cast<unsigned>(rows));
    flash_attention_dkdv_kernel<D><<<key_tiles, kWarps * 32, bytes, stream>>>(
        q16, k16, v16, mask, slots, dy, stats, tile_key_ends, s, scale, first_row, dk, dv,
        saved_grads);
  };
  const int64_t rows = score_grad_rows(s, budget);
  if (rows == 0) {
    dkdv(0, s.batch, nullptr);
    allow_shared_memory(reinterpret_cast<const void*>(flash_attention_dq_kernel<D>), bytes,
                        "flash_attention_dq");
    flash_attention_dq_kernel<D><<<query_tiles(s), kWarps * 32, bytes, stream>>>(
        q16, k16, v16, mask, slots, dy, stats, tile_key_ends, s, scale, grads);
    return;
  }
  allow_shared_memory(reinterpret_cast<const void*>(flash_attention_dq_from_ds_kernel<D>), bytes,
                      "flash_attention_dq_from_ds");
  for (int64_t first = 0; first < s.batch; first += rows) {
    const int64_t count = std::min(rows, s.batch - first);
    dkdv(first, count, score_grads);
    dim3 grid = query_tiles(s);
    grid.z = static_cast<unsigned>(count);
    flash_attention_dq_from_ds_kernel<D><<<grid, kWarps * 32, bytes, stream>>>(
        k16, mask, tile_key_ends, score_grads, s, first, grads);
  }
}

template <typename F>
void with_head_dim(int64_t head_dim, F launch) {
  if (!dispatch_head_dim(head_dim, launch)) {
    throw Error("[cuda attention] flash attention has no kernel for head_dim " +
                std::to_string(head_dim));
  }
}

// The tiles are read 16 bytes at a time.
void check_aligned(std::initializer_list<const void*> operands) {
  for (const void* p : operands) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
      throw Error("[cuda attention] the tiles' operands must be 16-byte aligned");
    }
  }
}

// The scratch of the backward pass: the rows' statistics, then each query tile's end of keys,
// then (from a 256-byte boundary) the scores' gradients of score_grad_rows() batch rows.
size_t row_stats_count(const AttentionShape& shape) {
  return static_cast<size_t>(2 * shape.batch * shape.seq * shape.q_heads);
}

size_t score_grads_offset(const AttentionShape& shape) {
  const size_t ends =
      row_stats_count(shape) * sizeof(float) + query_tiles(shape).x * sizeof(int32_t);
  return (ends + 255) / 256 * 256;
}

}  // namespace

bool flash_attention_applies(const AttentionShape& shape, DType kv_dtype) {
  return kv_dtype == DType::bf16 && shape.seq > 1 && dispatch_head_dim(shape.head_dim, [](auto) {});
}

size_t flash_attention_scratch_bytes(const AttentionShape& shape) {
  const int splits = key_split_count(shape);
  if (splits == 1) return 0;
  return static_cast<size_t>(shape.batch * shape.seq * shape.q_heads * splits *
                             (shape.head_dim + 2)) *
         sizeof(float);
}

void flash_attention(const void* q, DType q_dtype, const void* k, const void* v,
                     const int32_t* mask, const int32_t* slots, const AttentionShape& shape,
                     float scale, void* out, DType out_dtype, float* row_lse, void* scratch,
                     unsigned* arrivals, cudaStream_t stream) {
  if (shape.batch * shape.seq * shape.q_heads == 0) return;  // a grid of 0 blocks is a launch error
  check_aligned({q, k, v});
  KeySplits splits;
  if (scratch != nullptr && arrivals != nullptr) {
    splits = {key_split_count(shape), static_cast<float*>(scratch), arrivals};
  }
  with_head_dim(shape.head_dim, [&](auto d) {
    if (q_dtype == DType::f32) {
      // A cache's prefill (f32 q) writes f32; autocast's attention (bf16 q) either.
      if (out_dtype != DType::f32) throw Error("[cuda attention] f32 q writes an f32 output");
      launch_forward<decltype(d)::value, float, false>(
          q, k, v, mask, slots, shape, scale, static_cast<float*>(out),
          RowStatsTarget{.row_lse = row_lse}, splits, stream);
      return;
    }
    if (q_dtype != DType::bf16) throw Error("[cuda attention] q must be f32 or bf16");
    with_float_type(out_dtype, "flash_attention", [&](auto out_type) {
      using Out = typename decltype(out_type)::type;
      launch_forward<decltype(d)::value, __nv_bfloat16, false, Out>(
          q, k, v, mask, slots, shape, scale, static_cast<Out*>(out),
          RowStatsTarget{.row_lse = row_lse}, splits, stream);
    });
  });
  check_launch("flash_attention");
}

size_t flash_attention_grad_scratch_bytes(const AttentionShape& shape, size_t budget) {
  return score_grads_offset(shape) +
         static_cast<size_t>(score_grad_rows(shape, budget)) * score_grad_row_bytes(shape);
}

void flash_attention_grad(const void* q, const void* k, const void* v, const int32_t* mask,
                          const int32_t* slots, const void* dy, const AttentionShape& shape,
                          float scale, const SavedForward& saved, size_t budget, void* grads,
                          void* scratch, cudaStream_t stream) {
  if (shape.batch * shape.q_heads == 0) return;  // no gradient to write
  if (shape.seq == 0 || shape.cache_len == 0) {
    throw Error("[cuda attention_grad] flash-style needs queries and keys (seq " +
                std::to_string(shape.seq) + ", keys " + std::to_string(shape.cache_len) + ")");
  }
  check_aligned({q, k, v, dy});
  with_head_dim(shape.head_dim, [&](auto d) {
    auto* stats = static_cast<float*>(scratch);
    launch_backward<decltype(d)::value>(
        q, k, v, mask, slots, static_cast<const __nv_bfloat16*>(dy), shape, scale, saved, budget,
        static_cast<__nv_bfloat16*>(grads), stats,
        reinterpret_cast<int32_t*>(stats + row_stats_count(shape)),
        reinterpret_cast<__nv_bfloat16*>(static_cast<char*>(scratch) + score_grads_offset(shape)),
        stream);
  });
  check_launch("flash_attention_grad");
}

}  // namespace tfm::cuda
