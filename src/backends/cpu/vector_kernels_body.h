// The body of vector_kernels_avx2.cc and vector_kernels_avx512.cc: simd.h's vectors are those of
// the ISA the including file is compiled for, and TFM_VECTOR_ISA names its namespace. Included
// by those two files only.
#include <algorithm>
#include <type_traits>

#include "backends/cpu/kernels.h"
#include "backends/cpu/row_runs.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/vector_kernels.h"

namespace tfm::cpu::TFM_VECTOR_ISA {
namespace {

constexpr int kRowsPerTask = 4;  // weight rows processed together by one thread

// out[m, r0 + r] for kRowsPerTask weight rows and M rows of x: each weight vector loaded from
// memory serves every x row. M and the row count are compile-time so the accumulators stay in
// registers.
template <int M, int R, typename W>
void gemv_tile(const float* x, const W* w, int64_t r0, int64_t k, float* out, int64_t n) {
  using simd::Vec;
  Vec acc[M][R];
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = simd::zero();
  const W* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w + (r0 + r) * k;
  constexpr size_t kStepBytes = R * simd::kWidth * sizeof(W);
  int64_t p = 0;
  for (; p + simd::kWidth <= k; p += simd::kWidth) {
    Vec wv[R];
    // The next tile's rows, in address order, two cache lines per step, into L2: a tile is read as
    // R short interleaved streams, which the hardware prefetcher picks up late. Into L1 (T0)
    // instead, 4 rows of x streamed Qwen3-0.6B's weights at 21-23 GB/s against 29-30 (AMD EPYC,
    // gemv_bench).
    const char* ahead = reinterpret_cast<const char*>(rows[0] + R * k) + p * R * sizeof(W);
    for (size_t line = 0; line < kStepBytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T1);
    for (int r = 0; r < R; ++r) wv[r] = simd::load(rows[r] + p);
    for (int i = 0; i < M; ++i) {
      const Vec xv = simd::load(x + i * k + p);
      for (int r = 0; r < R; ++r) acc[i][r] = simd::fma(wv[r], xv, acc[i][r]);
    }
  }
  float sums[M][R];
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < R; ++r) sums[i][r] = simd::sum(acc[i][r]);
  for (; p < k; ++p) {
    for (int r = 0; r < R; ++r) {
      const float wv = simd::widen(w[(r0 + r) * k + p]);
      for (int i = 0; i < M; ++i) sums[i][r] += wv * x[i * k + p];
    }
  }
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < R; ++r) out[i * n + r0 + r] = sums[i][r];
}

// The last rows when n is not a multiple of kRowsPerTask: rare and small, so plain loops.
template <typename W>
void gemv_leftover(const float* x, int64_t m, const W* w, int64_t r0, int64_t n, int64_t k,
                   float* out) {
  for (int64_t r = r0; r < n; ++r) {
    for (int64_t i = 0; i < m; ++i) {
      float sum = 0.f;
      for (int64_t p = 0; p < k; ++p) sum += simd::widen(w[r * k + p]) * x[i * k + p];
      out[i * n + r] = sum;
    }
  }
}

template <int M, typename W>
void gemv_fixed(const float* x, const W* w, int64_t n, int64_t k, float* out) {
  constexpr int R = kRowsPerTask;
  const int64_t tiles = n / R;
  // Dynamic chunks of 16 tiles: a thread slowed by the other core's traffic does not hold up the
  // whole product at the barrier.
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t t = 0; t < tiles; ++t) gemv_tile<M, R>(x, w, t * R, k, out, n);
  gemv_leftover(x, M, w, tiles * R, n, k, out);
}

// How far ahead of its loads row_dot prefetches its row (and the next). The hardware prefetcher
// alone kept one stream per thread well below the memory's bandwidth on a Xeon with AMX (the 197
// products of a Qwen3-0.6B decode step: 74-82 ms; prefetched 1 KB ahead 54-58, 4 KB ahead 44-47;
// gemv_bench, bench/RESULTS.md). Into L2 (T1), not L1: a core has few more L1 misses in flight
// than it takes to cover memory's latency, and on another Xeon with AMX the rows streamed at 22-23
// GB/s prefetched into L1, 26-28 into L2, where the bandwidth probe read 32-34.
constexpr size_t kRowBytesAhead = 4096;

// x . w_row, four accumulators deep so the FMAs' latency is hidden behind the loads.
template <typename W>
float row_dot(const float* x, const W* w, int64_t k) {
  using simd::Vec;
  constexpr int64_t kW = simd::kWidth;
  Vec a0 = simd::zero(), a1 = simd::zero(), a2 = simd::zero(), a3 = simd::zero();
  int64_t p = 0;
  for (; p + 4 * kW <= k; p += 4 * kW) {
    const char* ahead = reinterpret_cast<const char*>(w + p) + kRowBytesAhead;
    for (size_t line = 0; line < 4 * kW * sizeof(W); line += 64)
      _mm_prefetch(ahead + line, _MM_HINT_T1);
    a0 = simd::fma(simd::load(w + p), simd::load(x + p), a0);
    a1 = simd::fma(simd::load(w + p + kW), simd::load(x + p + kW), a1);
    a2 = simd::fma(simd::load(w + p + 2 * kW), simd::load(x + p + 2 * kW), a2);
    a3 = simd::fma(simd::load(w + p + 3 * kW), simd::load(x + p + 3 * kW), a3);
  }
  for (; p + kW <= k; p += kW) a0 = simd::fma(simd::load(w + p), simd::load(x + p), a0);
  float total = simd::sum((a0 + a1) + (a2 + a3));
  for (; p < k; ++p) total += simd::widen(w[p]) * x[p];
  return total;
}

// One row of x (decode at batch 1): each thread reads whole weight rows one after another, a
// single sequential stream, prefetched ahead (row_dot). The tiles above read R rows side by side,
// R short streams: on a 2-core AMD EPYC the 197 products of a Qwen3-0.6B decode step streamed at
// 26-28 GB/s in tiles, 31-38 as whole rows (gemv_bench, bench/RESULTS.md). Each thread takes one
// run of rows (row_runs.h): handed out 64 at a time, the threads' streams broke every 128 KB (a
// Xeon with AMX: 26.4-27.1 GB/s, against 27.2-29.9 in one run each). A thread done first takes
// rows off the end of the other's run: in a run each, the first done had waited 5% of a decode
// step's products (Qwen3-0.6B, Xeon with AMX); taking rows, decode ran 2.4% faster (6 of 6 runs).
template <typename W>
void gemv_one_row(const float* x, const W* w, int64_t n, int64_t k, float* out) {
  rows_in_runs(n, [&](int64_t r) { out[r] = row_dot(x, w + r * k, k); });
}

void gemv_bf16_one_row_each(const float* x, const Bf16Rows* weights, int64_t count, int64_t k) {
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) total += weights[i].n;
  rows_in_runs(total, [&](int64_t r) {
    const Bf16Rows* part = weights;
    int64_t row = r;
    while (row >= part->n) row -= (part++)->n;
    part->out[row] = row_dot(x, part->w + row * k, k);
  });
}

template <typename W>
void gemv(const float* x, const W* w, int64_t m, int64_t n, int64_t k, float* out) {
  // Up to 4 rows of x share one pass over the weights; more rows take more passes.
  for (int64_t m0 = 0; m0 < m; m0 += 4) {
    const float* xs = x + m0 * k;
    float* os = out + m0 * n;
    switch (std::min<int64_t>(4, m - m0)) {
      case 1:
        gemv_one_row(xs, w, n, k, os);
        break;
      case 2:
        gemv_fixed<2>(xs, w, n, k, os);
        break;
      case 3:
        gemv_fixed<3>(xs, w, n, k, os);
        break;
      default:
        gemv_fixed<4>(xs, w, n, k, os);
        break;
    }
  }
}

// Attention's keys for a few queries (decode): each listed key's cache row, which holds every KV
// head, is read for all the query heads, in blocks of a vector's width of keys. In a block, the
// query heads that share a KV head read its part of the rows from L1, and a query head's dot
// products with the block's keys are summed across lanes together, where one key at a time each
// took a horizontal sum of its own. Read a KV head at a time over all the keys instead (each
// thread its heads' part of every row, a row's width apart), 28 layers' attention over a cold
// cache of 1001 keys took 401-411 us a layer against 335-339 (Qwen3-0.6B's heads, Xeon with AMX,
// 2 threads). The hardware's prefetchers follow the blocks' rows: prefetching the next block in
// software changed nothing.
constexpr int kSharedQueries = 4;        // query heads per pass over a KV head's part of a row
constexpr int kKeyBlock = simd::kWidth;  // keys a block: one vector of scores

// scores[r * count + j] = scale * q[r] . rows[j] for R adjacent query heads and a block of keys:
// each key's dot products one after another (each key's vectors loaded once for the R heads),
// then the block's sums across lanes at once (simd::sums), where one at a time each took a
// horizontal sum of its own.
template <int R, typename KV>
void block_scores(const float* q, const KV* const (&rows)[kKeyBlock], int64_t dim, float scale,
                  float* scores, int64_t count) {
  using simd::Vec;
  Vec dots[R][kKeyBlock];
  const int64_t whole = dim / simd::kWidth * simd::kWidth;
  for (int j = 0; j < kKeyBlock; ++j) {
    Vec acc[R];
    for (int r = 0; r < R; ++r) acc[r] = simd::zero();
    for (int64_t d = 0; d < whole; d += simd::kWidth) {
      const Vec kv = simd::load(rows[j] + d);
      for (int r = 0; r < R; ++r) acc[r] = simd::fma(kv, simd::load(q + r * dim + d), acc[r]);
    }
    for (int r = 0; r < R; ++r) dots[r][j] = acc[r];
  }
  for (int r = 0; r < R; ++r) {
    float sums[kKeyBlock];
    simd::store(sums, simd::sums(dots[r]));
    for (int j = 0; j < kKeyBlock; ++j) {
      for (int64_t e = whole; e < dim; ++e) sums[j] += q[r * dim + e] * simd::widen(rows[j][e]);
      scores[r * count + j] = sums[j] * scale;
    }
  }
}

// out[r * dim + d] += sum over j < K of probs[r * count + j] values[j][at + d] for R adjacent
// query heads: each of out's vectors is loaded and stored once for K keys, not once a key (a
// store and its reload a key apart left the sums waiting on store forwarding).
template <int R, int K, typename KV>
void add_head_values(const float* probs, int64_t count, const KV* const (&values)[K], int64_t at,
                     int64_t dim, float* out) {
  using simd::Vec;
  int64_t d = 0;
  for (; d + simd::kWidth <= dim; d += simd::kWidth) {
    Vec acc[R];
    for (int r = 0; r < R; ++r) acc[r] = simd::load(out + r * dim + d);
    for (int j = 0; j < K; ++j) {
      const Vec vv = simd::load(values[j] + at + d);
      for (int r = 0; r < R; ++r)
        acc[r] = simd::fma(simd::broadcast(probs[r * count + j]), vv, acc[r]);
    }
    for (int r = 0; r < R; ++r) simd::store(out + r * dim + d, acc[r]);
  }
  for (; d < dim; ++d) {
    for (int j = 0; j < K; ++j) {
      const float vv = simd::widen(values[j][at + d]);
      for (int r = 0; r < R; ++r) out[r * dim + d] += probs[r * count + j] * vv;
    }
  }
}

// f(heads, r0) for the `group` query heads that share a KV head, in passes of up to
// kSharedQueries from the r0-th: heads a std::integral_constant, so that the passes' accumulators
// stay in registers.
template <typename F>
void for_head_passes(int64_t group, F&& f) {
  for (int64_t r0 = 0; r0 < group; r0 += kSharedQueries) {
    switch (std::min<int64_t>(kSharedQueries, group - r0)) {
      case 1:
        f(std::integral_constant<int, 1>{}, r0);
        break;
      case 2:
        f(std::integral_constant<int, 2>{}, r0);
        break;
      case 3:
        f(std::integral_constant<int, 3>{}, r0);
        break;
      default:
        f(std::integral_constant<int, 4>{}, r0);
        break;
    }
  }
}

// add_head_values for every query head over K keys of the rows `values`.
template <int K, typename KV>
void add_values(const float* probs, int64_t count, const KV* const (&values)[K], int64_t kv_heads,
                int64_t group, int64_t dim, float* out) {
  for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
    for_head_passes(group, [&](auto heads, int64_t r0) {
      const int64_t h = kvh * group + r0;
      add_head_values<decltype(heads)::value, K>(probs + h * count, count, values, kvh * dim, dim,
                                                 out + h * dim);
    });
  }
}

template <typename KV>
void key_scores(const float* q, int64_t q_heads, int64_t kv_heads, const KV* k, int64_t stride,
                const int32_t* keys, int64_t count, int64_t dim, float scale, float* scores) {
  const int64_t group = q_heads / kv_heads;
  int64_t i = 0;
  for (; i + kKeyBlock <= count; i += kKeyBlock) {
    for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
      const KV* rows[kKeyBlock];
      for (int j = 0; j < kKeyBlock; ++j) rows[j] = k + keys[i + j] * stride + kvh * dim;
      for_head_passes(group, [&](auto heads, int64_t r0) {
        const int64_t h = kvh * group + r0;
        block_scores<decltype(heads)::value>(q + h * dim, rows, dim, scale, scores + h * count + i,
                                             count);
      });
    }
  }
  // The keys after the last whole block: one dot product each, the GEMV's.
  for (; i < count; ++i) {
    for (int64_t h = 0; h < q_heads; ++h) {
      const KV* key = k + keys[i] * stride + (h / group) * dim;
      scores[h * count + i] = row_dot(q + h * dim, key, dim) * scale;
    }
  }
}

template <typename KV>
void weighted_values(const float* probs, int64_t q_heads, int64_t kv_heads, const KV* v,
                     int64_t stride, const int32_t* keys, int64_t count, int64_t dim, float* out) {
  const int64_t group = q_heads / kv_heads;
  std::fill(out, out + q_heads * dim, 0.f);
  int64_t i = 0;
  for (; i + kKeyBlock <= count; i += kKeyBlock) {
    const KV* rows[kKeyBlock];
    for (int j = 0; j < kKeyBlock; ++j) rows[j] = v + keys[i + j] * stride;
    add_values(probs + i, count, rows, kv_heads, group, dim, out);
  }
  for (; i < count; ++i) {
    const KV* const row[1] = {v + keys[i] * stride};
    add_values(probs + i, count, row, kv_heads, group, dim, out);
  }
}

// The maps' functions are named structs, not lambdas: a captureless lambda brings a conversion
// to a function pointer that GCC compiles without the AVX-512 target pragma around it.
struct ExpShifted {
  float shift, scale;
  simd::Vec operator()(simd::Vec x) const {
    return simd::exp(x - simd::broadcast(shift)) * simd::broadcast(scale);
  }
};

struct Silu {
  simd::Vec operator()(simd::Vec v) const {
    return v / (simd::broadcast(1.f) + simd::exp(simd::zero() - v));
  }
};

struct SiluGrad {
  simd::Vec operator()(simd::Vec v, simd::Vec g) const {
    const simd::Vec one = simd::broadcast(1.f);
    const simd::Vec sigmoid = one / (one + simd::exp(simd::zero() - v));
    return g * sigmoid * (one + v * (one - sigmoid));
  }
};

void exp_shifted(const float* in, float* out, int64_t n, float shift, float scale) {
  simd::map(in, out, n, ExpShifted{shift, scale});
}

void silu(float* x, int64_t n) { simd::map(x, x, n, Silu{}); }

// One pass for the largest kept score and one for the weights, their sum and their rounding; the
// tail, padded with dropped keys, goes through the same vector steps.
float attention_weights_bf16(const float* scores, const int32_t* row_mask, int64_t begin,
                             int64_t end, int64_t keys, float scale, uint16_t* weights) {
  constexpr int64_t kWidth = simd::kWidth;
  std::fill(weights, weights + begin, uint16_t{0});
  std::fill(weights + end, weights + keys, uint16_t{0});
  const int64_t whole = begin + (end - begin) / kWidth * kWidth;
  float tail_scores[kWidth] = {};
  int32_t tail_mask[kWidth] = {};
  std::copy(scores + whole, scores + end, tail_scores);
  std::copy(row_mask + whole, row_mask + end, tail_mask);
  const simd::Vec times = simd::broadcast(scale), none = simd::broadcast(-INFINITY);
  simd::Vec highest = simd::where_set(tail_mask, simd::load(tail_scores) * times, none);
  for (int64_t j = begin; j < whole; j += kWidth) {
    highest =
        simd::max(highest, simd::where_set(row_mask + j, simd::load(scores + j) * times, none));
  }
  const float max_score = simd::max_of(highest);
  if (max_score == -INFINITY) {
    std::fill(weights + begin, weights + end, uint16_t{0});
    return 0.f;
  }
  const simd::Vec shift = simd::broadcast(max_score);
  simd::Vec total = simd::zero();
  const auto weigh = [&](const float* s, const int32_t* kept) {
    const simd::Vec e =
        simd::where_set(kept, simd::exp(simd::load(s) * times - shift), simd::zero());
    total = total + e;
    return e;
  };
  for (int64_t j = begin; j < whole; j += kWidth) {
    simd::store_bf16(weights + j, weigh(scores + j, row_mask + j));
  }
  uint16_t tail_weights[kWidth];
  simd::store_bf16(tail_weights, weigh(tail_scores, tail_mask));
  std::copy(tail_weights, tail_weights + (end - whole), weights + whole);
  return 1.f / simd::sum(total);
}

void round_bf16(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + simd::kWidth <= n; i += simd::kWidth) simd::store_bf16(out + i, simd::load(x + i));
  for (; i < n; ++i) out[i] = f32_to_bf16_bits(x[i]);
}

void silu_grad(float* x, const float* dy, int64_t n) { simd::map2(x, dy, x, n, SiluGrad{}); }

}  // namespace

extern const VectorKernels kernels;
const VectorKernels kernels{
    .isa = simd::kIsaName,
    .gemv_f32 = gemv<float>,
    .gemv_bf16 = gemv<uint16_t>,
    .gemv_bf16_one_row_each = gemv_bf16_one_row_each,
    .key_scores_f32 = key_scores<float>,
    .key_scores_bf16 = key_scores<uint16_t>,
    .weighted_values_f32 = weighted_values<float>,
    .weighted_values_bf16 = weighted_values<uint16_t>,
    .exp_shifted = exp_shifted,
    .silu = silu,
    .attention_weights_bf16 = attention_weights_bf16,
    .round_bf16 = round_bf16,
    .silu_grad = silu_grad,
};

}  // namespace tfm::cpu::TFM_VECTOR_ISA
