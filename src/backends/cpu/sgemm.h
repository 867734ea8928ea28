// oneDNN's f32 sgemm as the CPU kernels call it, and bf16 weights fed to it: widened one block of
// rows at a time, each block small enough to stay in L3 while the product reads it (f32 products
// are ~2x faster than bf16 ones on these CPUs, see docs).
#pragma once

#include <dnnl.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tfm/dtype.h"
#include "tfm/error.h"

namespace tfm::cpu {

// Row-major C = alpha op(A) op(B) + beta C; `op` names the caller in the error.
inline void sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc, const char* op) {
  const dnnl_status_t status =
      dnnl_sgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) {
    throw Error(std::string("[") + op + "] oneDNN sgemm failed (status " + std::to_string(status) +
                ") for M=" + std::to_string(m) + " N=" + std::to_string(n) +
                " K=" + std::to_string(k));
  }
}

// Calls use(tile, first_row, rows) for consecutive blocks of rows of the bf16 matrix w [n, k],
// with `tile` holding those rows as f32.
template <typename Use>
void for_each_f32_tile(const uint16_t* w, int64_t n, int64_t k, Use use) {
  constexpr size_t kTileBytes = 4 << 20;
  const int64_t tile_rows =
      std::max<int64_t>(64, static_cast<int64_t>(kTileBytes / sizeof(float)) / k);
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(tile_rows * k));
  float* tile = scratch.data();  // the OpenMP threads below must share the caller's buffer
  for (int64_t r0 = 0; r0 < n; r0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, n - r0);
    const uint16_t* src = w + r0 * k;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows * k; ++i) tile[i] = bf16_bits_to_f32(src[i]);
    use(tile, r0, rows);
  }
}

}  // namespace tfm::cpu
