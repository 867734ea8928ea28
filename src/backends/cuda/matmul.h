// Matrix products through cuBLASLt: y[m, n] = x[m, k] · w[n, k]^T in f32, with x and w both f32
// or both bf16 (f32 accumulation). The algorithm is chosen once per shape, when a graph compiles.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tfm/dtype.h"

namespace tfm::cuda {

// Workspace each product may use; the caller provides it.
inline constexpr size_t kMatmulWorkspaceBytes = size_t{32} << 20;

class Matmul {
 public:
  Matmul(int64_t m, int64_t n, int64_t k, DType dtype);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  void run(const void* x, const void* w, float* y, void* workspace, cudaStream_t stream) const;

 private:
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t w_layout_ = nullptr, x_layout_ = nullptr, y_layout_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

}  // namespace tfm::cuda
