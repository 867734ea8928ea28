// The matrix products of a linear layer's backward pass, and the row sums of its bias gradient.
// Training keeps f32 master weights, so both products run as oneDNN f32 sgemm.
#include <dnnl.h>

#include "backends/cpu/kernels.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

void sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float* c, int64_t ldc, const char* op) {
  const dnnl_status_t status =
      dnnl_sgemm(transa, transb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  if (status != dnnl_success) {
    throw Error(std::string("[") + op + "] oneDNN sgemm failed (status " + std::to_string(status) +
                ") for M=" + std::to_string(m) + " N=" + std::to_string(n) +
                " K=" + std::to_string(k));
  }
}

void check_f32(DType dtype, const char* op) {
  if (dtype != DType::f32) {
    throw Error(std::string("[") + op + "] weights of dtype " + std::string(dtype_name(dtype)) +
                " are not supported on cpu for training (f32 master weights)");
  }
}

}  // namespace

void linear_grad_input(const float* dy, const void* w, DType w_dtype, int64_t m, int64_t n,
                       int64_t k, float* dx) {
  check_f32(w_dtype, "linear_grad_input");
  sgemm('N', 'N', m, k, n, dy, n, static_cast<const float*>(w), k, dx, k, "linear_grad_input");
}

void linear_grad_weight(const float* dy, const float* x, int64_t m, int64_t n, int64_t k,
                        float* dw) {
  sgemm('T', 'N', n, k, m, dy, n, x, k, dw, k, "linear_grad_weight");
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
