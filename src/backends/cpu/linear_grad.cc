// The matrix products of a linear layer's backward pass, and the row sums of its bias gradient.
// Both products run as oneDNN f32 sgemm; bf16 weights (bf16 autocast) are widened first.
#include <dnnl.h>

#include <algorithm>
#include <vector>

#include "backends/cpu/kernels.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

constexpr size_t kTileBytes = 4 << 20;  // bf16 weights widened per sgemm call: stays in L3

void sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           const char* op) {
  const dnnl_status_t status =
      dnnl_sgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) {
    throw Error(std::string("[") + op + "] oneDNN sgemm failed (status " + std::to_string(status) +
                ") for M=" + std::to_string(m) + " N=" + std::to_string(n) +
                " K=" + std::to_string(k));
  }
}

void check_dtype(DType dtype, const char* op) {
  if (dtype != DType::f32 && dtype != DType::bf16) {
    throw Error(std::string("[") + op + "] weights of dtype " + std::string(dtype_name(dtype)) +
                " are not supported on cpu (f32, bf16)");
  }
}

}  // namespace

void linear_grad_input(const float* dy, const void* w, DType w_dtype, int64_t m, int64_t n,
                       int64_t k, float* dx) {
  if (w_dtype == DType::f32) {
    sgemm('N', 'N', m, k, n, 1.f, dy, n, static_cast<const float*>(w), k, 0.f, dx, k,
          "linear_grad_input");
    return;
  }
  check_dtype(w_dtype, "linear_grad_input");
  // bf16 weights (autocast): widened one L2-sized block of rows at a time, each block adding its
  // share of dy @ w into dx.
  const int64_t tile_rows = std::max<int64_t>(64, static_cast<int64_t>(kTileBytes / 4) / k);
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(tile_rows * k));
  float* tile = scratch.data();
  const auto* wb = static_cast<const uint16_t*>(w);
  for (int64_t r0 = 0; r0 < n; r0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, n - r0);
    const uint16_t* src = wb + r0 * k;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows * k; ++i) tile[i] = bf16_bits_to_f32(src[i]);
    sgemm('N', 'N', m, k, rows, 1.f, dy + r0, n, tile, k, r0 == 0 ? 0.f : 1.f, dx, k,
          "linear_grad_input");
  }
}

void linear_grad_weight(const float* dy, const float* x, int64_t m, int64_t n, int64_t k,
                        float* dw) {
  sgemm('T', 'N', n, k, m, 1.f, dy, n, x, k, 0.f, dw, k, "linear_grad_weight");
}

void reduce_rows(const float* x, int64_t rows, int64_t n, float* out) {
#pragma omp parallel for schedule(static) if (rows * n > kParallelMinElements)
  for (int64_t j = 0; j < n; ++j) {
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += x[r * n + j];
    out[j] = static_cast<float>(sum);
  }
}

}  // namespace tfm::cpu
