// The body of vector_kernels_avx2.cc and vector_kernels_avx512.cc: simd.h's vectors are those of
// the ISA the including file is compiled for, and TFM_VECTOR_ISA names its namespace. Included
// by those two files only.
#include <algorithm>

#include "backends/cpu/kernels.h"
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

// x . w_row, four accumulators deep so the FMAs' latency is hidden behind the loads.
template <typename W>
float row_dot(const float* x, const W* w, int64_t k) {
  using simd::Vec;
  constexpr int64_t kW = simd::kWidth;
  Vec a0 = simd::zero(), a1 = simd::zero(), a2 = simd::zero(), a3 = simd::zero();
  int64_t p = 0;
  for (; p + 4 * kW <= k; p += 4 * kW) {
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
// single sequential stream that the hardware prefetcher follows to the memory's bandwidth. The
// tiles above read R rows side by side, R short streams: on a 2-core AMD EPYC the 197 products
// of a Qwen3-0.6B decode step streamed at 26-28 GB/s in tiles, 31-38 as whole rows (gemv_bench,
// bench/RESULTS.md).
template <typename W>
void gemv_one_row(const float* x, const W* w, int64_t n, int64_t k, float* out) {
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t r = 0; r < n; ++r) out[r] = row_dot(x, w + r * k, k);
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
    .dot_f32 = simd::dot<float>,
    .dot_bf16 = simd::dot<uint16_t>,
    .axpy_f32 = simd::axpy<float>,
    .axpy_bf16 = simd::axpy<uint16_t>,
    .exp_shifted = exp_shifted,
    .silu = silu,
    .round_bf16 = round_bf16,
    .silu_grad = silu_grad,
};

}  // namespace tfm::cpu::TFM_VECTOR_ISA
