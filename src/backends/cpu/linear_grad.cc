// The matrix products of a linear layer's backward pass, and the row sums of its bias gradient.
// Both products run as oneDNN f32 sgemm, bf16 weights (bf16 autocast) widened first; or, where
// both operands are bf16 and the CPU has native bf16 dot products, as oneDNN's bf16 matmul.
#include "backends/cpu/bf16_gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/sgemm.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

void check_dtype(DType dtype, const char* op) {
  if (dtype != DType::f32 && dtype != DType::bf16) {
    throw Error(std::string("[") + op + "] weights of dtype " + std::string(dtype_name(dtype)) +
                " are not supported on cpu (f32, bf16)");
  }
}

}  // namespace

void linear_grad_input(const float* dy, const void* w, DType w_dtype, int64_t m, int64_t n,
                       int64_t k, float* dx, bool accumulate) {
  const float beta = accumulate ? 1.f : 0.f;
  if (w_dtype == DType::f32) {
    sgemm('N', 'N', m, k, n, 1.f, dy, n, static_cast<const float*>(w), k, beta, dx, k,
          "linear_grad_input");
    return;
  }
  check_dtype(w_dtype, "linear_grad_input");
  // bf16 weights (autocast): each block of rows adds its share of dy @ w into dx.
  for_each_f32_tile(static_cast<const uint16_t*>(w), n, k,
                    [&](const float* tile, int64_t r0, int64_t rows) {
                      sgemm('N', 'N', m, k, rows, 1.f, dy + r0, n, tile, k, r0 == 0 ? beta : 1.f,
                            dx, k, "linear_grad_input");
                    });
}

void linear_grad_weight(const float* dy, const float* x, int64_t m, int64_t n, int64_t k, float* dw,
                        bool accumulate) {
  sgemm('T', 'N', n, k, m, 1.f, dy, n, x, k, accumulate ? 1.f : 0.f, dw, k, "linear_grad_weight");
}

void linear_grad_input_bf16(const uint16_t* dy, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                            float* dx, bool accumulate) {
  bf16_gemm(m, k, n, {dy, n, 1}, {w, k, 1}, dx, k, accumulate, "linear_grad_input");
}

void linear_grad_weight_bf16(const uint16_t* dy, const uint16_t* x, int64_t m, int64_t n, int64_t k,
                             float* dw, bool accumulate) {
  bf16_gemm(n, k, m, {dy, 1, n}, {x, k, 1}, dw, k, accumulate, "linear_grad_weight");
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
