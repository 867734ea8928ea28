// The body of vector_kernels_avx2.cc and vector_kernels_avx512.cc: simd.h's vectors are those of
// the ISA the including file is compiled for, and TFM_VECTOR_ISA names its namespace. Included
// by those two files only.
#include <algorithm>

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

// Attention's keys for a decode step: the query heads that share a KV head take each key and
// value row from memory once, and the loops over keys stay inside one call.
constexpr int kSharedQueries = 4;  // query rows per pass over the keys
constexpr int64_t kKeysAhead = 4;  // listed rows prefetched ahead: they lie scattered in the cache

template <typename KV>
void prefetch_row(const KV* row, int64_t dim) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (int64_t at = 0; at < dim * static_cast<int64_t>(sizeof(KV)); at += 64)
    _mm_prefetch(bytes + at, _MM_HINT_T0);
}

// scores[r * count + i] for R query rows and the keys two at a time: 2R accumulator chains hide
// the FMAs' latency.
template <int R, typename KV>
void key_scores_rows(const float* q, const KV* k, int64_t stride, const int32_t* keys,
                     int64_t count, int64_t dim, float scale, float* scores, int64_t row_stride) {
  using simd::Vec;
  for (int64_t i = 0; i < count; i += 2) {
    const int pair = i + 1 < count ? 2 : 1;
    const KV* rows[2] = {k + keys[i] * stride, k + keys[i + pair - 1] * stride};
    for (int64_t a = i + kKeysAhead; a < std::min(count, i + kKeysAhead + 2); ++a)
      prefetch_row(k + keys[a] * stride, dim);
    Vec acc[2][R];
    for (int j = 0; j < 2; ++j)
      for (int r = 0; r < R; ++r) acc[j][r] = simd::zero();
    int64_t d = 0;
    for (; d + simd::kWidth <= dim; d += simd::kWidth) {
      const Vec kv[2] = {simd::load(rows[0] + d), simd::load(rows[1] + d)};
      for (int r = 0; r < R; ++r) {
        const Vec qv = simd::load(q + r * dim + d);
        for (int j = 0; j < 2; ++j) acc[j][r] = simd::fma(qv, kv[j], acc[j][r]);
      }
    }
    for (int j = 0; j < pair; ++j) {
      for (int r = 0; r < R; ++r) {
        float total = simd::sum(acc[j][r]);
        for (int64_t e = d; e < dim; ++e) total += q[r * dim + e] * simd::widen(rows[j][e]);
        scores[r * row_stride + i + j] = total * scale;
      }
    }
  }
}

template <typename KV>
void key_scores(const float* q, int64_t rows, const KV* k, int64_t stride, const int32_t* keys,
                int64_t count, int64_t dim, float scale, float* scores) {
  for (int64_t r0 = 0; r0 < rows; r0 += kSharedQueries) {
    const float* qs = q + r0 * dim;
    float* out = scores + r0 * count;
    switch (std::min<int64_t>(kSharedQueries, rows - r0)) {
      case 1:
        key_scores_rows<1>(qs, k, stride, keys, count, dim, scale, out, count);
        break;
      case 2:
        key_scores_rows<2>(qs, k, stride, keys, count, dim, scale, out, count);
        break;
      case 3:
        key_scores_rows<3>(qs, k, stride, keys, count, dim, scale, out, count);
        break;
      default:
        key_scores_rows<4>(qs, k, stride, keys, count, dim, scale, out, count);
        break;
    }
  }
}

// out[r, d0 .. d0 + V vectors) for R rows over every key: R x V accumulator chains.
template <int R, int V, typename KV>
void weighted_values_block(const float* probs, int64_t count, const KV* v, int64_t stride,
                           const int32_t* keys, int64_t dim, int64_t d0, float* out) {
  using simd::Vec;
  Vec acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < V; ++t) acc[r][t] = simd::zero();
  for (int64_t i = 0; i < count; ++i) {
    const KV* row = v + keys[i] * stride + d0;
    if (i + kKeysAhead < count)
      prefetch_row(v + keys[i + kKeysAhead] * stride + d0, V * simd::kWidth);
    Vec vv[V];
    for (int t = 0; t < V; ++t) vv[t] = simd::load(row + t * simd::kWidth);
    for (int r = 0; r < R; ++r) {
      const Vec p = simd::broadcast(probs[r * count + i]);
      for (int t = 0; t < V; ++t) acc[r][t] = simd::fma(p, vv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < V; ++t) simd::store(out + r * dim + d0 + t * simd::kWidth, acc[r][t]);
}

template <int R, typename KV>
void weighted_values_rows(const float* probs, int64_t count, const KV* v, int64_t stride,
                          const int32_t* keys, int64_t dim, float* out) {
  // Vectors of the row at once: R x 4 accumulator chains.
  constexpr int kVectors = 4;
  int64_t d = 0;
  for (; d + kVectors * simd::kWidth <= dim; d += kVectors * simd::kWidth)
    weighted_values_block<R, kVectors>(probs, count, v, stride, keys, dim, d, out);
  for (; d + simd::kWidth <= dim; d += simd::kWidth)
    weighted_values_block<R, 1>(probs, count, v, stride, keys, dim, d, out);
  for (; d < dim; ++d) {
    for (int r = 0; r < R; ++r) {
      float total = 0.f;
      for (int64_t i = 0; i < count; ++i)
        total += probs[r * count + i] * simd::widen(v[keys[i] * stride + d]);
      out[r * dim + d] = total;
    }
  }
}

template <typename KV>
void weighted_values(const float* probs, int64_t rows, const KV* v, int64_t stride,
                     const int32_t* keys, int64_t count, int64_t dim, float* out) {
  for (int64_t r0 = 0; r0 < rows; r0 += kSharedQueries) {
    const float* ps = probs + r0 * count;
    float* os = out + r0 * dim;
    switch (std::min<int64_t>(kSharedQueries, rows - r0)) {
      case 1:
        weighted_values_rows<1>(ps, count, v, stride, keys, dim, os);
        break;
      case 2:
        weighted_values_rows<2>(ps, count, v, stride, keys, dim, os);
        break;
      case 3:
        weighted_values_rows<3>(ps, count, v, stride, keys, dim, os);
        break;
      default:
        weighted_values_rows<4>(ps, count, v, stride, keys, dim, os);
        break;
    }
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
