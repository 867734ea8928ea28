// Matrix products with transposed weights, as every projection in these models is.
// Small M (decode) is memory bound: a hand-written GEMV streams the weights once and widens bf16
// in registers. Large M (prefill, training) is compute bound: oneDNN's f32 sgemm, fed bf16
// weights widened one L2-sized tile at a time (f32 compute is ~2x faster than bf16 dot products on
// this class of CPU, see docs).
#include <dnnl.h>
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backends/cpu/kernels.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

constexpr int64_t kGemvMaxRows = 8;   // beyond this, sgemm's blocking wins
constexpr int64_t kRowsPerTask = 4;   // weight rows processed together by one thread
constexpr int64_t kTileRows = 128;    // bf16 weight rows widened per sgemm call

#if defined(__AVX512F__)
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}
#endif

inline float widen(float v) { return v; }
inline float widen(uint16_t v) { return bf16_bits_to_f32(v); }

// y[m, r] for rows r0..r0+rows of w and up to 4 rows of x at once, so each weight vector loaded
// from memory serves every x row.
template <typename W>
void gemv_block(const float* x, int64_t xm, const W* w, int64_t r0, int64_t rows, int64_t k,
                float* out, int64_t n) {
  for (int64_t m0 = 0; m0 < xm; m0 += 4) {
    const int64_t mm = std::min<int64_t>(4, xm - m0);
    float acc_scalar[4][kRowsPerTask] = {};
    int64_t p = 0;
#if defined(__AVX512F__)
    __m512 acc[4][kRowsPerTask];
    for (auto& row : acc) for (auto& a : row) a = _mm512_setzero_ps();
    for (; p + 16 <= k; p += 16) {
      __m512 xv[4];
      for (int64_t i = 0; i < mm; ++i) xv[i] = _mm512_loadu_ps(x + (m0 + i) * k + p);
      for (int64_t r = 0; r < rows; ++r) {
        const __m512 wv = load16(w + (r0 + r) * k + p);
        for (int64_t i = 0; i < mm; ++i) acc[i][r] = _mm512_fmadd_ps(wv, xv[i], acc[i][r]);
      }
    }
    for (int64_t i = 0; i < mm; ++i)
      for (int64_t r = 0; r < rows; ++r) acc_scalar[i][r] = _mm512_reduce_add_ps(acc[i][r]);
#endif
    for (; p < k; ++p) {
      for (int64_t r = 0; r < rows; ++r) {
        const float wv = widen(w[(r0 + r) * k + p]);
        for (int64_t i = 0; i < mm; ++i) acc_scalar[i][r] += wv * x[(m0 + i) * k + p];
      }
    }
    for (int64_t i = 0; i < mm; ++i)
      for (int64_t r = 0; r < rows; ++r) out[(m0 + i) * n + r0 + r] = acc_scalar[i][r];
  }
}

template <typename W>
void gemv(const float* x, const W* w, int64_t m, int64_t n, int64_t k, float* out) {
  const int64_t tasks = (n + kRowsPerTask - 1) / kRowsPerTask;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t r0 = t * kRowsPerTask;
    gemv_block(x, m, w, r0, std::min(kRowsPerTask, n - r0), k, out, n);
  }
}

void sgemm_nt(const float* x, const float* w, int64_t m, int64_t n, int64_t k, float* out,
              int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm('N', 'T', m, n, k, 1.0f, x, k, w, k, 0.0f, out, ldc);
  if (status != dnnl_success) {
    throw Error("[linear] oneDNN sgemm failed (status " + std::to_string(status) + ") for M=" +
                std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
  }
}

void gemm_bf16_weights(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                       float* out) {
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(kTileRows * k));
  float* tile = scratch.data();  // the OpenMP threads below must share the caller's buffer
  for (int64_t r0 = 0; r0 < n; r0 += kTileRows) {
    const int64_t rows = std::min(kTileRows, n - r0);
    const uint16_t* src = w + r0 * k;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows * k; ++i) tile[i] = bf16_bits_to_f32(src[i]);
    sgemm_nt(x, tile, m, rows, k, out + r0, n);
  }
}

}  // namespace

void linear(const float* x, const void* w, DType w_dtype, const float* bias, int64_t m, int64_t n,
            int64_t k, float* out) {
  const bool small = m <= kGemvMaxRows;
  if (w_dtype == DType::f32) {
    const auto* wf = static_cast<const float*>(w);
    if (small) gemv(x, wf, m, n, k, out);
    else sgemm_nt(x, wf, m, n, k, out, n);
  } else if (w_dtype == DType::bf16) {
    const auto* wb = static_cast<const uint16_t*>(w);
    if (small) gemv(x, wb, m, n, k, out);
    else gemm_bf16_weights(x, wb, m, n, k, out);
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
