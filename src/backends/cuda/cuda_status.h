// CUDA and cuBLAS failures become tfm errors that name the call that failed.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "tfm/dtype.h"

namespace tfm::cuda {

void check(cudaError_t status, const char* call);
void check(cublasStatus_t status, const char* call);
// After a kernel launch: a bad configuration or an earlier asynchronous fault shows up here.
void check_launch(const char* kernel);
std::string gib(size_t bytes);  // "1.25 GiB"
// Before a launch whose kernel writes f32 or bf16: any other dtype is an error naming the op.
void check_float_kind(DType dtype, const char* op);

}  // namespace tfm::cuda

#define TFM_CUDA(call) ::tfm::cuda::check((call), #call)
