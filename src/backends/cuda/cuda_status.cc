#include "backends/cuda/cuda_status.h"

#include <cstdio>

#include "tfm/error.h"

namespace tfm::cuda {

void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clears a non-sticky error so the process can go on after the throw
  throw Error(std::string("CUDA call ") + call + " failed: " + cudaGetErrorName(status) + " (" +
              cudaGetErrorString(status) + ")");
}

void check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string("cuBLAS call ") + call + " failed: " + cublasLtGetStatusName(status) +
              " (" + cublasLtGetStatusString(status) + ")");
}

void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return;
  throw Error(std::string("CUDA kernel ") + kernel + " failed to launch: " +
              cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1u << 30));
  return text;
}

void check_float_kind(DType dtype, const char* op) {
  if (dtype != DType::f32 && dtype != DType::bf16) {
    throw Error(std::string("[cuda ") + op + "] dtype " + std::string(dtype_name(dtype)) +
                " is not supported (f32, bf16)");
  }
}

}  // namespace tfm::cuda
