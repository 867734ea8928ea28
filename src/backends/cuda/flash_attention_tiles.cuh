// What the flash-style attention kernels (see flash_attention.cu), forward and backward, share:
// their tiles in shared memory, how those are copied in while the warps compute, and the
// tensor-core products over them. In a header of their own so tests/cuda_emulation can run them
// on the CPU.
#pragma once

#include <cuda_bf16.h>

#include <utility>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/warp_mma.cuh"

namespace tfm::cuda {
namespace {

// The head sizes with a kernel.
using HeadDims = std::integer_sequence<int, 16, 32, 64, 128>;

template <typename F, int... Ds>
bool dispatch_over(int64_t head_dim, F launch, std::integer_sequence<int, Ds...>) {
  return ((head_dim == Ds ? (launch(std::integral_constant<int, Ds>{}), true) : false) || ...);
}

// Calls launch(std::integral_constant<int, head_dim>{}) if head_dim has a kernel; says whether.
template <typename F>
bool dispatch_head_dim(int64_t head_dim, F launch) {
  return dispatch_over(head_dim, launch, HeadDims{});
}

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = 16;  // an mma fragment's rows: the queries (or keys) one warp owns
constexpr int kBlockRows = kWarps * kWarpRows;
constexpr int kTileKeys = 64;
static_assert(kTileKeys == kBlockRows, "the tiles below hold a block's queries or keys alike");
// A launch's tiles of queries and of keys.
__host__ __device__ inline int64_t query_tile_count(const AttentionShape& s) {
  return (s.seq + kBlockRows - 1) / kBlockRows;
}
__host__ __device__ inline int64_t key_tile_count(const AttentionShape& s) {
  return (s.cache_len + kTileKeys - 1) / kTileKeys;
}

// Shared rows padded by 16 bytes so that the 8 rows an ldmatrix phase reads start on different
// banks.
constexpr int kPad = 8;

// A tile of 64 rows of one head in shared memory, bf16. The products read their right-hand
// fragments from it by ldmatrix, straight for one whose columns are the tile's rows (q k^T),
// transposed for one whose rows are (P v).
template <int D>
struct TileLayout {
  static constexpr int ld = D + kPad;
  static constexpr size_t bytes = size_t{kTileKeys} * ld * 2;
};

// The scores' gradients of a query tile against a key tile, bf16: what the dk/dv kernel saves
// for flash_attention_dq_from_ds_kernel.
constexpr size_t kScoreGradTileBytes = size_t{kBlockRows} * kTileKeys * 2;

// The kernels' shared memory: two stages (the tiles being read, and the next being copied), each
// two tiles (the second may hold a tile of the scores' gradients instead) and, per row of the
// tiles, an int (the keys' mask values, or the queries' slots) and two floats (the queries' lse
// and delta, for the dk/dv kernel).
template <int D>
struct StageLayout {
  static constexpr size_t rows_a = 0, rows_b = TileLayout<D>::bytes;
  static constexpr size_t ints =
      rows_b +
      (TileLayout<D>::bytes > kScoreGradTileBytes ? TileLayout<D>::bytes : kScoreGradTileBytes);
  static constexpr size_t row_stats = ints + kTileKeys * sizeof(int32_t);
  static constexpr size_t stage = row_stats + kTileKeys * 2 * sizeof(float);
  static constexpr size_t total = 2 * stage;
};
// An sm_90 block may have 227 KB of shared memory.
static_assert(StageLayout<128>::total <= 227 * 1024);

// One stage of StageLayout.
template <int D>
struct StageTiles {
  __nv_bfloat16 *rows_a, *rows_b;
  int32_t* ints;
  float* row_stats;

  __device__ StageTiles(unsigned char* smem, int buffer)
      : rows_a(reinterpret_cast<__nv_bfloat16*>(at(smem, buffer, StageLayout<D>::rows_a))),
        rows_b(reinterpret_cast<__nv_bfloat16*>(at(smem, buffer, StageLayout<D>::rows_b))),
        ints(reinterpret_cast<int32_t*>(at(smem, buffer, StageLayout<D>::ints))),
        row_stats(reinterpret_cast<float*>(at(smem, buffer, StageLayout<D>::row_stats))) {}

  static __device__ unsigned char* at(unsigned char* smem, int buffer, size_t offset) {
    return smem + buffer * StageLayout<D>::stage + offset;
  }
};

// Rows first .. first + 63 of one head of a [B, n, heads, D] tensor into a tile by
// asynchronous copies (async_copy.cuh), rows past n zeros; a mask is applied after they land
// (clear_masked_rows). Thread x copies the same 16-byte piece of rows x / pieces,
// x / pieces + kThreads / pieces, ..: one address each, stepped by a stride, where an address a
// copy would leave the walk too few registers.
template <int D>
__device__ __forceinline__ void stage_rows(const __nv_bfloat16* src, int64_t b, int64_t n,
                                           int64_t heads, int64_t head, int64_t first,
                                           __nv_bfloat16* tile) {
  constexpr int kPieces = D / 8;
  constexpr int kRowsAtOnce = kThreads / kPieces;
  static_assert(kThreads % kPieces == 0 && kTileKeys % kRowsAtOnce == 0);
  const int r0 = static_cast<int>(threadIdx.x) / kPieces,
            part = static_cast<int>(threadIdx.x) % kPieces;
  const int64_t stride = kRowsAtOnce * heads * D;
  const __nv_bfloat16* from = src + ((b * n + first + r0) * heads + head) * D + part * 8;
  __nv_bfloat16* to = tile + r0 * TileLayout<D>::ld + part * 8;
#pragma unroll
  for (int i = 0; i < kTileKeys / kRowsAtOnce; ++i) {
    const bool present = first + r0 + i * kRowsAtOnce < n;
    copy_async<16>(to + i * kRowsAtOnce * TileLayout<D>::ld, present ? from + i * stride : src,
                   present);
  }
}

// Values src[0 .. 63] into dst, zeros from src[count] on; thread c stages value c.
__device__ __forceinline__ void stage_ints(const int32_t* src, int64_t count, int32_t* dst) {
  const int c = static_cast<int>(threadIdx.x);
  if (c < kTileKeys) copy_async<4>(dst + c, c < count ? src + c : src, c < count);
}

// Once a key tile and its keys' mask values (kept, stage_ints) have landed: a barrier of the
// block, then zeros over the rows of masked-out keys in the tiles (a, and b unless null), for a
// cache may hold non-finite values there and a zero probability times those is not zero. Thread c
// staged kept[c], so it may read it before the barrier, which is the block's vote on whether any
// key is masked.
template <int D>
__device__ __forceinline__ void clear_masked_rows(const int32_t* kept, __nv_bfloat16* a,
                                                  __nv_bfloat16* b) {
  const bool masked = threadIdx.x < kTileKeys && kept[threadIdx.x] == 0;
  if (!__syncthreads_or(masked)) return;
  constexpr int kPieces = D / 8;
  for (int e = threadIdx.x; e < kTileKeys * kPieces; e += kThreads) {
    const int r = e / kPieces, at = r * TileLayout<D>::ld + e % kPieces * 8;
    if (kept[r] != 0) continue;
    *reinterpret_cast<uint4*>(a + at) = uint4{0, 0, 0, 0};
    if (b != nullptr) *reinterpret_cast<uint4*>(b + at) = uint4{0, 0, 0, 0};
  }
  __syncthreads();
}

// Runs compute(item, buffer) for each item from first on (next(item) gives the one after, or
// -1; first -1: none), while stage(item after, other buffer) copies the next item's tiles into
// the other of two buffers, so that the copies overlap the products. compute runs once the
// calling thread's copies of its item have landed, and must start with a barrier of the block,
// after which every thread's have.
template <typename Next, typename Stage, typename Compute>
__device__ __forceinline__ void double_buffered(int64_t first, Next next, Stage stage,
                                                Compute compute) {
  if (first < 0) return;
  __syncthreads();  // the block's earlier reads of the buffers are over
  stage(first, 0);
  commit_copies();
  int buffer = 0;
  for (int64_t item = first; item >= 0; buffer ^= 1) {
    const int64_t following = next(item);
    __syncthreads();  // no thread still reads the other buffer (the item before)
    if (following >= 0) stage(following, buffer ^ 1);
    commit_copies();  // past the last item an empty group, so that one wait serves every item
    wait_copies<1>();
    compute(item, buffer);
    item = following;
  }
}

// What a walk over key tiles stages beside the keys and values: nothing.
struct NothingMore {
  template <typename Tiles>
  __device__ void operator()(int64_t, const Tiles&) const {}
};

// Walks the key tiles key0 = first, first + 64, .. below stop of KV head kvh of batch row b, each
// staged one ahead (double_buffered): keys into rows_a, values into rows_b (unless v is null:
// then stage_more(key0, tiles) may fill it), their mask values into ints. compute(key0, tiles)
// runs once the tile has landed and its masked keys' rows are zeros.
template <int D, typename Compute, typename StageMore = NothingMore>
__device__ __forceinline__ void over_key_tiles(unsigned char* smem, const __nv_bfloat16* k,
                                               const __nv_bfloat16* v, const int32_t* mask,
                                               const AttentionShape& s, int64_t b, int64_t kvh,
                                               int64_t first, int64_t stop, Compute compute,
                                               StageMore stage_more = {}) {
  double_buffered(
      first < stop ? first : -1,
      [&](int64_t key0) { return key0 + kTileKeys < stop ? key0 + kTileKeys : -1; },
      [&](int64_t key0, int buffer) {
        const StageTiles<D> tiles(smem, buffer);
        stage_rows<D>(k, b, s.cache_len, s.kv_heads, kvh, key0, tiles.rows_a);
        if (v != nullptr) stage_rows<D>(v, b, s.cache_len, s.kv_heads, kvh, key0, tiles.rows_b);
        stage_ints(mask + b * s.cache_len + key0, s.cache_len - key0, tiles.ints);
        stage_more(key0, tiles);
      },
      [&](int64_t key0, int buffer) {
        const StageTiles<D> tiles(smem, buffer);
        clear_masked_rows<D>(tiles.ints, tiles.rows_a, v != nullptr ? tiles.rows_b : nullptr);
        compute(key0, tiles);
      });
}

// The keys queries first_query .. first_query + rows - 1 may see end at their largest slot
// (causal: later key tiles are skipped). Each lane of a warp reads rows / 32 slots; all get the
// end.
__device__ inline int64_t keys_seen_by(const int32_t* slots, const AttentionShape& s,
                                       int64_t first_query, int rows = kBlockRows) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  int end = 0;
  for (int i = lane; i < rows; i += 32) {
    if (first_query + i < s.seq) end = max(end, slots[first_query + i] + 1);
  }
  end = warp_reduce(end, [](int a, int b) { return max(a, b); });
  return min(static_cast<int64_t>(end), s.cache_len);
}

// Block i of n takes query tile n - 1 - i (causal: the later a tile, the more keys it sees).
__device__ __forceinline__ int latest_first(int i, int n) { return n - 1 - i; }

// Lane l's address for an ldmatrix .x4 over rows first .. first + 15 of a tile, columns from
// `column`: row l % 8 + 8 ((l / 8) % 2), columns from column + 8 (l / 16). Straight, the matrices
// are a left-hand fragment (rows by k); transposed, the right-hand fragments of two [16, 8]
// blocks side by side (rows along k: P v).
template <int D>
__device__ __forceinline__ const __nv_bfloat16* fragment_row(const __nv_bfloat16* tile, int first,
                                                             int column) {
  const int lane = threadIdx.x % 32;
  return tile + (first + lane % 8 + 8 * (lane / 8 % 2)) * TileLayout<D>::ld + column +
         8 * (lane / 16);
}

// A warp's 16 rows first .. first + 15 of a tile as the left-hand fragments of a product over d
// (warp_mma.cuh's layout), one ldmatrix .x4 a step of 16.
template <int D>
__device__ void row_fragments(const __nv_bfloat16* tile, int first, uint32_t (&a)[D / 16][4]) {
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    load_matrices_x4<false>(a[kc], fragment_row<D>(tile, first, kc * 16));
  }
}

// The right-hand fragments of q k^T for keys first .. first + 7 (m[0], m[1]) and first + 8 ..
// first + 15 (m[2], m[3]) over d = 16 kc .. 16 kc + 15, from a tile of keys: lane l points
// ldmatrix at row l % 8 + 8 (l / 16), columns from 16 kc + 8 ((l / 8) % 2).
template <int D>
__device__ __forceinline__ void key_fragments(const __nv_bfloat16* tile, int first, int kc,
                                              uint32_t (&m)[4]) {
  const int lane = threadIdx.x % 32;
  load_matrices_x4<false>(m, tile + (first + lane % 8 + 8 * (lane / 16)) * TileLayout<D>::ld +
                                 kc * 16 + 8 * (lane / 8 % 2));
}

// low, high [16, 8] += a [16, D] times rows first .. first + 7 and first + 8 .. first + 15 of a
// tile, transposed (q k^T).
template <int D>
__device__ __forceinline__ void times_rows_t(const uint32_t (&a)[D / 16][4],
                                             const __nv_bfloat16* tile, int first, float (&low)[4],
                                             float (&high)[4]) {
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    uint32_t m[4];
    key_fragments<D>(tile, first, kc, m);
    const uint32_t b_low[2] = {m[0], m[1]}, b_high[2] = {m[2], m[3]};
    mma_16x8x16(low, a[kc], b_low);
    mma_16x8x16(high, a[kc], b_high);
  }
}

// acc [16, D] += a [16, 16] times rows first .. first + 15 of a tile (P v): matrices 0 and 1 of
// each transposed load are the right-hand fragment of d block db, 2 and 3 of db + 1.
template <int D>
__device__ __forceinline__ void times_rows(const uint32_t (&a)[4], const __nv_bfloat16* tile,
                                           int first, float (&acc)[D / 8][4]) {
#pragma unroll
  for (int db = 0; db < D / 8; db += 2) {
    uint32_t m[4];
    load_matrices_x4<true>(m, fragment_row<D>(tile, first, db * 8));
    const uint32_t b_low[2] = {m[0], m[1]}, b_high[2] = {m[2], m[3]};
    mma_16x8x16(acc[db], a, b_low);
    mma_16x8x16(acc[db + 1], a, b_high);
  }
}

// Two accumulated [16, 8] blocks, side by side, as the left-hand fragment of a product over
// their 16 columns.
__device__ __forceinline__ void as_left_fragment(const float (&low)[4], const float (&high)[4],
                                                 uint32_t (&a)[4]) {
  a[0] = bf16_pair(low[0], low[1]), a[1] = bf16_pair(low[2], low[3]);
  a[2] = bf16_pair(high[0], high[1]), a[3] = bf16_pair(high[2], high[3]);
}

// The softmax runs in base 2, as exp2f is one special-function instruction and expf several: the
// scores scaled by scale * log2(e), a row's running max in those units.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

}  // namespace
}  // namespace tfm::cuda
