// Matrix products with transposed weights, as every projection in these models is.
// Small M (decode) is memory bound: a hand-written GEMV streams the weights once and widens bf16
// in registers. Large M (prefill, training) is compute bound: with bf16 weights, oneDNN's bf16
// matmul (x rounded to bf16, as torch's bf16 activations are; f32 accumulation) where the CPU has
// native bf16 dot products (cpu_isa().bf16_products), else oneDNN's f32 sgemm fed the weights
// widened one L3-sized block of rows at a time (f32 compute is ~2x faster than emulated bf16 dot
// products).
#include <algorithm>
#include <vector>

#include "backends/cpu/bf16_gemm.h"
#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/simd.h"
#include "tfm/error.h"

namespace tfm::cpu {
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
    // The next tile's rows, in address order, two cache lines per step: a tile is read as R
    // short interleaved streams, which the hardware prefetcher picks up late.
    const char* ahead = reinterpret_cast<const char*>(rows[0] + R * k) + p * R * sizeof(W);
    for (size_t line = 0; line < kStepBytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
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
  // One x row leaves registers for more weight streams in flight.
  constexpr int R = M == 1 ? 2 * kRowsPerTask : kRowsPerTask;
  const int64_t tiles = n / R;
  // Dynamic chunks of 16 tiles: a thread slowed by the other core's traffic does not hold up the
  // whole product at the barrier.
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t t = 0; t < tiles; ++t) gemv_tile<M, R>(x, w, t * R, k, out, n);
  gemv_leftover(x, M, w, tiles * R, n, k, out);
}

template <typename W>
void gemv(const float* x, const W* w, int64_t m, int64_t n, int64_t k, float* out) {
  // Up to 4 rows of x share one pass over the weights; more rows take more passes.
  for (int64_t m0 = 0; m0 < m; m0 += 4) {
    const float* xs = x + m0 * k;
    float* os = out + m0 * n;
    switch (std::min<int64_t>(4, m - m0)) {
      case 1:
        gemv_fixed<1>(xs, w, n, k, os);
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

void sgemm_nt(const float* x, const float* w, int64_t m, int64_t n, int64_t k, float* out,
              int64_t ldc) {
  sgemm('N', 'T', m, n, k, 1.f, x, k, w, k, 0.f, out, ldc, "linear");
}

void gemm_widened_weights(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                          float* out) {
  for_each_f32_tile(w, n, k, [&](const float* tile, int64_t r0, int64_t rows) {
    sgemm_nt(x, tile, m, rows, k, out + r0, n);
  });
}

void gemm_bf16_products(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                        float* out) {
  thread_local std::vector<uint16_t> rounded;
  rounded.resize(static_cast<size_t>(m * k));
  round_to_bf16(x, m * k, rounded.data());
  bf16_gemm(m, n, k, {rounded.data(), k, 1}, {w, 1, k}, out, n, false, "linear");
}

}  // namespace

void linear_bf16_weights(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                         float* out, BigProducts path) {
  if (m <= kGemvRows) {
    gemv(x, w, m, n, k, out);
  } else if (path == BigProducts::kBf16) {
    gemm_bf16_products(x, w, m, n, k, out);
  } else {
    gemm_widened_weights(x, w, m, n, k, out);
  }
}

BigProducts big_products_path() {
  return cpu_isa().bf16_products ? BigProducts::kBf16 : BigProducts::kWidened;
}

void linear(const float* x, const void* w, DType w_dtype, const float* bias, int64_t m, int64_t n,
            int64_t k, float* out) {
  const bool small = m <= kGemvRows;
  if (w_dtype == DType::f32) {
    const auto* wf = static_cast<const float*>(w);
    if (small)
      gemv(x, wf, m, n, k, out);
    else
      sgemm_nt(x, wf, m, n, k, out, n);
  } else if (w_dtype == DType::bf16) {
    linear_bf16_weights(x, static_cast<const uint16_t*>(w), m, n, k, out, big_products_path());
  } else {
    throw Error("[linear] weights of dtype " + std::string(dtype_name(w_dtype)) +
                " are not supported on cpu (f32, bf16)");
  }
  if (bias == nullptr) return;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) out[i * n + j] += bias[j];
  }
}

}  // namespace tfm::cpu
