// The optimizer's arithmetic on device buffers (graph::Backend::adamw_update, sum_squares),
// launched on the backend's stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/adamw.h"

namespace tfm::cuda {

void adamw_update(const ops::AdamWScalars& s, float decay, float* p, const float* g, float* m,
                  float* v, int64_t n, cudaStream_t stream);
// Waits for the stream: the sum is returned on the host.
double sum_squares(const float* x, int64_t n, cudaStream_t stream);

}  // namespace tfm::cuda
