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

Matmul::Matmul(int64_t m, int64_t n, int64_t k, DType dtype, MatmulOperand a, MatmulOperand b,
               MatmulOperand y, int64_t batch) {
  const cudaDataType_t in = cuda_type(dtype);
  // cuBLASLt is column-major, where a row-major [r, c] matrix reads as its transpose [c, r]: the
  // row-major y = op(a) · op(b) is the column-major y^T [n, m] = op(b)^T · op(a)^T, so b goes
  // first and each keeps its own transpose flag.
  const auto layout = [batch](cudaDataType_t type, int64_t rows, int64_t cols,
                              const MatmulOperand& operand) {
    cublasLtMatrixLayout_t created = nullptr;
    TFM_CUDA(cublasLtMatrixLayoutCreate(&created, type, static_cast<uint64_t>(cols),
                                        static_cast<uint64_t>(rows),
                                        operand.ld > 0 ? operand.ld : cols));
    MatrixLayout owned(created);
    if (batch == 1) return owned;
    const auto count = static_cast<int32_t>(batch);
    TFM_CUDA(cublasLtMatrixLayoutSetAttribute(created, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                              sizeof count));
    TFM_CUDA(cublasLtMatrixLayoutSetAttribute(created, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                              &operand.stride, sizeof operand.stride));
    return owned;
  };
  const int64_t a_rows = a.transposed ? k : m, a_cols = a.transposed ? m : k;
  const int64_t b_rows = b.transposed ? n : k, b_cols = b.transposed ? k : n;
  cublasLtMatmulDesc_t op = nullptr;
  TFM_CUDA(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  op_.reset(op);
  const cublasOperation_t op_b = b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  TFM_CUDA(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
  TFM_CUDA(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
  b_layout_ = layout(in, b_rows, b_cols, b);
  a_layout_ = layout(in, a_rows, a_cols, a);
  y_layout_ = layout(cuda_type(y.dtype), m, n, y);

  cublasLtMatmulPreference_t preference = nullptr;
  TFM_CUDA(cublasLtMatmulPreferenceCreate(&preference));
  const MatmulPreference owned_preference(preference);
  const size_t workspace = kMatmulWorkspaceBytes;
  TFM_CUDA(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
  TFM_CUDA(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &b.alignment, sizeof b.alignment));
  TFM_CUDA(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &a.alignment, sizeof a.alignment));
  // y is the product's D, and its C too unless an addend is given (C, of y's layout).
  TFM_CUDA(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &y.alignment, sizeof y.alignment));
  TFM_CUDA(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &y.alignment, sizeof y.alignment));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle(), op, b_layout_.get(), a_layout_.get(), y_layout_.get(), y_layout_.get(), preference,
      1, &result, &found);
  // cuBLASLt says "not supported" when it finds nothing for these layouts.
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) TFM_CUDA(status);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) {
    throw Error("[cuda linear] cuBLASLt has no algorithm for a " + std::to_string(a_rows) + "x" +
                std::to_string(a_cols) + " by " + std::to_string(b_rows) + "x" +
                std::to_string(b_cols) + " " + std::string(dtype_name(dtype)) + " product");
  }
  algo_ = result.algo;
}

void Matmul::run(const void* a, const void* b, void* y, void* workspace, cudaStream_t stream,
                 const float* addend) const {
  const float one = 1.f, beta = addend != nullptr ? 1.f : 0.f;
  const void* c = addend != nullptr ? addend : y;
  TFM_CUDA(cublasLtMatmul(handle(), op_.get(), &one, b, b_layout_.get(), a, a_layout_.get(), &beta,
                          c, y_layout_.get(), y, y_layout_.get(), &algo_, workspace,
                          kMatmulWorkspaceBytes, stream));
}

}  // namespace tfm::cuda
