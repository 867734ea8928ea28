// The optimizer's arithmetic on device buffers (graph::Op::kAdamW, kSumSquares), launched on the
// backend's stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tfm::cuda {

// `scalars`: the step's ops::AdamWScalars packed (ops::pack), on the device.
void adamw_update(const float* scalars, bool decays, float* p, const float* g, float* m, float* v,
                  int64_t n, cudaStream_t stream);
// The sum of x^2 in double over fixed chunks added in order, rounded into `out` (f32 on the
// device); `scratch` holds sum_squares_scratch_bytes(n).
size_t sum_squares_scratch_bytes(int64_t n);
void sum_squares(const float* x, int64_t n, float* out, void* scratch, cudaStream_t stream);

}  // namespace tfm::cuda
