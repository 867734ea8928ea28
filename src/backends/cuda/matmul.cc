#include "backends/cuda/matmul.h"

#include "backends/cuda/cuda_status.h"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

cublasLtHandle_t handle() {
  // One handle for the process, made on first use; it lives as long as the CUDA context.
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t created = nullptr;
    TFM_CUDA(cublasLtCreate(&created));
    return created;
  }();
  return h;
}

cudaDataType_t cuda_type(DType dtype) {
  if (dtype == DType::bf16) return CUDA_R_16BF;
  if (dtype == DType::f32) return CUDA_R_32F;
  throw Error("[cuda linear] matrix products of dtype " + std::string(dtype_name(dtype)) +
              " are not supported (f32, bf16)");
}

}  // namespace

Matmul::Matmul(int64_t m, int64_t n, int64_t k, DType dtype) {
  const cudaDataType_t in = cuda_type(dtype);
  // Column-major view of the row-major product: y^T [n, m] = w [k, n]^T · x^T [k, m].
  TFM_CUDA(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  TFM_CUDA(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                          sizeof transpose));
  TFM_CUDA(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep));
  TFM_CUDA(cublasLtMatrixLayoutCreate(&w_layout_, in, static_cast<uint64_t>(k),
                                      static_cast<uint64_t>(n), k));
  TFM_CUDA(cublasLtMatrixLayoutCreate(&x_layout_, in, static_cast<uint64_t>(k),
                                      static_cast<uint64_t>(m), k));
  TFM_CUDA(cublasLtMatrixLayoutCreate(&y_layout_, CUDA_R_32F, static_cast<uint64_t>(n),
                                      static_cast<uint64_t>(m), n));

  cublasLtMatmulPreference_t preference = nullptr;
  TFM_CUDA(cublasLtMatmulPreferenceCreate(&preference));
  const size_t workspace = kMatmulWorkspaceBytes;
  TFM_CUDA(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle(), op_, w_layout_, x_layout_, y_layout_, y_layout_,
                                     preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  TFM_CUDA(status);
  if (found == 0) {
    throw Error("[cuda linear] cuBLASLt has no algorithm for a " + std::to_string(m) + "x" +
                std::to_string(k) + " by " + std::to_string(n) + "x" + std::to_string(k) + " " +
                std::string(dtype_name(dtype)) + " product");
  }
  algo_ = result.algo;
}

Matmul::~Matmul() {
  cublasLtMatrixLayoutDestroy(y_layout_);
  cublasLtMatrixLayoutDestroy(x_layout_);
  cublasLtMatrixLayoutDestroy(w_layout_);
  cublasLtMatmulDescDestroy(op_);
}

void Matmul::run(const void* x, const void* w, float* y, void* workspace,
                 cudaStream_t stream) const {
  const float one = 1.f, zero = 0.f;
  TFM_CUDA(cublasLtMatmul(handle(), op_, &one, w, w_layout_, x, x_layout_, &zero, y, y_layout_, y,
                          y_layout_, &algo_, workspace, kMatmulWorkspaceBytes, stream));
}

}  // namespace tfm::cuda
