// Products of bf16 weights with any number of rows of f32 x on AVX-512's f32 FMAs, the weights
// widened in registers, x kept f32: for CPUs with AVX-512 whose vdpbf16ps, if any, does not outrun
// the FMAs (cpu_isa().widened_products). oneDNN's sgemm needs the weights widened into memory
// first; with the weights in L3 this kernel ran Qwen3-0.6B's products of 128 rows at 250-288
// GFLOP/s on a Xeon (70-80% of the FMAs' peak), and streamed from memory, in 614-720 ms against
// oneDNN's 783-839 (320 against 593 at 64 rows); from 1 to 16 rows it streamed the weights faster
// than the GEMV (gemv_bench). Under a
// target pragma, run only where cpu_isa() finds AVX-512.
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_intrinsics.h"
#include "backends/cpu/vector_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")
#include "backends/cpu/sums_of_16.h"

namespace tfm::cpu::avx512_widened {
namespace {

// A 512-bit load of weights holds 32 bf16 values: its even ones widen by a shift and its odd ones
// by a mask, one instruction each, so x is read in the same split (split_pairs) and each load
// feeds two FMAs per row of x.
constexpr int64_t kPairs = 32;

// x's rows, `ldx` apart, with each 32 values as their 16 even ones then their 16 odd ones, zero
// past k up to `padded`, a multiple of 32. Shared among the threads of the enclosing region.
void split_pairs(const float* x, int64_t m, int64_t k, int64_t padded, int64_t ldx, float* out) {
#pragma omp for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    float* row = out + i * ldx;
    for (int64_t p = 0; p < padded; p += kPairs) {
      for (int64_t j = 0; j < kPairs; ++j) {
        const int64_t from = p + j;
        const float value = from < k ? x[i * k + from] : 0.f;
        row[p + (j % 2) * 16 + j / 2] = value;
      }
    }
  }
}

struct Operands {
  const float* x;  // split_pairs' rows, `ldx` apart
  int64_t ldx, padded;
  const uint16_t* w;
  int64_t k;
  float* out;
  int64_t ldo;
};

// The products' span of k that one pass over a group of x's rows covers: 8 rows of 1024 values,
// 32 KiB, stay in L1 (48 KiB on a Xeon); a group of 3072 read x from L2 at 196 GFLOP/s against
// 240 for 1024 (Qwen3-0.6B's products of 128 rows).
constexpr int64_t kSpan = 1024;

// Rows [i0, i0 + M) of out, columns [r0, r0 + R), over k's values [p0, p1): stored, or added to
// what earlier spans stored. Masked loads only where k is not a multiple of 32 (a masked load of
// bf16 takes an ALU instruction beside the FMAs).
template <int M, int R, bool Masked>
void tile(const Operands& o, int64_t i0, int64_t r0, int64_t p0, int64_t p1) {
  const float* x = o.x + i0 * o.ldx;
  const uint16_t* w = o.w + r0 * o.k;
  const int64_t k = o.k, ldx = o.ldx;
  const __m512i odd = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  __m512 acc[M][R];
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t p = p0; p < p1; p += kPairs) {
    // The next tile's rows, in address order, into L2 (as vector_kernels_avx512_bf16.cc does): a
    // tile is read as R short interleaved streams, which the hardware prefetcher picks up late.
    const char* ahead = reinterpret_cast<const char*>(w + R * k) + p * R * 2;
    for (int line = 0; line < R * 64; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T1);
    __m512 even_w[R], odd_w[R];
    for (int r = 0; r < R; ++r) {
      __m512i v;
      if constexpr (Masked) {
        const __mmask32 mask =
            k - p >= kPairs ? ~__mmask32{0} : _cvtu32_mask32((1u << (k - p)) - 1);
        v = _mm512_maskz_loadu_epi16(mask, w + r * k + p);
      } else {
        v = _mm512_loadu_si512(w + r * k + p);
      }
      even_w[r] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      odd_w[r] = _mm512_castsi512_ps(_mm512_and_si512(v, odd));
    }
    for (int i = 0; i < M; ++i) {
      __m512 even_x = _mm512_loadu_ps(x + i * ldx + p);
      __m512 odd_x = _mm512_loadu_ps(x + i * ldx + p + 16);
      // In registers: GCC would fold the load into each of the row's FMAs, and twice the loads
      // outrun the two a cycle that 512-bit loads have.
      __asm__("" : "+v"(even_x), "+v"(odd_x));
      for (int r = 0; r < R; ++r) {
        acc[i][r] = _mm512_fmadd_ps(even_x, even_w[r], acc[i][r]);
        acc[i][r] = _mm512_fmadd_ps(odd_x, odd_w[r], acc[i][r]);
      }
    }
  }
  float* out = o.out + i0 * o.ldo + r0;
  const bool first = p0 == 0;
  if constexpr (M * R == 16) {
    __m512 in[16];
#pragma GCC unroll 16
    for (int s = 0; s < 16; ++s) in[avx512_lanes::kSlot[s]] = acc[s / R][s % R];
    alignas(64) float sums[16];  // lane R i + r: row i of x, weight row r
    _mm512_store_ps(sums, avx512_lanes::sums_of_16(in));
    for (int i = 0; i < M; ++i)
      for (int r = 0; r < R; ++r)
        out[i * o.ldo + r] = sums[R * i + r] + (first ? 0.f : out[i * o.ldo + r]);
  } else {
    for (int i = 0; i < M; ++i)
      for (int r = 0; r < R; ++r)
        out[i * o.ldo + r] = _mm512_reduce_add_ps(acc[i][r]) + (first ? 0.f : out[i * o.ldo + r]);
  }
}

using Tile = void (*)(const Operands&, int64_t, int64_t, int64_t, int64_t);

// 8 rows of x against 2 weight rows: 16 accumulators, and per 32 values of k 4 widening
// instructions for 32 FMAs (4 x 4 took 8). Up to 4 rows of x, 4 weight rows a tile.
template <int R>
constexpr int64_t kGroup = 16 / R;

template <int R, bool Masked, size_t... Rows>
constexpr std::array<Tile, sizeof...(Rows)> tiles(std::index_sequence<Rows...>) {
  return {&tile<static_cast<int>(Rows) + 1, R, Masked>...};
}

// tile<M, R, Masked> for M = 1 to Group rows of x, at M - 1.
template <int R, int64_t Group, bool Masked>
constexpr auto kTiles = tiles<R, Masked>(std::make_index_sequence<Group>{});

// Weight rows [r0, r1) against every row of x, a span of k at a time: a group of x's rows stays in
// L1 while the block's weights, read from L2, pass it.
template <int R, bool Masked>
void block(const Operands& o, int64_t m, int64_t r0, int64_t r1) {
  constexpr int64_t group = kGroup<R>;
  for (int64_t p0 = 0; p0 < o.padded; p0 += kSpan) {
    const int64_t p1 = std::min(o.padded, p0 + kSpan);
    for (int64_t i0 = 0; i0 < m; i0 += group) {
      const auto rows = static_cast<size_t>(std::min(group, m - i0) - 1);
      int64_t r = r0;
      for (; r + R <= r1; r += R) kTiles<R, group, Masked>[rows](o, i0, r, p0, p1);
      for (; r < r1; ++r) kTiles<1, group, Masked>[rows](o, i0, r, p0, p1);
    }
  }
}

template <bool Masked>
void block(const Operands& o, int64_t m, int64_t r0, int64_t r1) {
  if (m <= kGroup<4>) {
    block<4, Masked>(o, m, r0, r1);
  } else {
    block<2, Masked>(o, m, r0, r1);
  }
}

}  // namespace

void products(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, float* out) {
  const int64_t padded = (k + kPairs - 1) / kPairs * kPairs;
  thread_local Scratch split;
  // Rows a cache line further apart than a multiple of 4 KiB, which would put a group's rows in
  // one set of L1.
  const int64_t ldx = padded + 16;
  split.resize(static_cast<size_t>(m * ldx));
  // The caller's buffer: in the threads below, `split` names each thread's own.
  float* xs = split.data();
  const Operands o{xs, ldx, padded, w, k, out, n};
  // Blocks of about 256 KiB of weights, an even number of rows, for L2.
  const int64_t block_rows = std::max<int64_t>(16, (int64_t{256} << 10) / (2 * k)) / 2 * 2;
  const int64_t blocks = (n + block_rows - 1) / block_rows;
  // x is split in the region the products run in, by both threads: one region a product, not two
  // (a decode step runs 197 of them).
#pragma omp parallel
  {
    split_pairs(x, m, k, padded, ldx, xs);
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t r0 = b * block_rows, r1 = std::min(n, r0 + block_rows);
      if (k % kPairs == 0) {
        block<false>(o, m, r0, r1);
      } else {
        block<true>(o, m, r0, r1);
      }
    }
  }
}

}  // namespace tfm::cpu::avx512_widened

#pragma GCC pop_options
