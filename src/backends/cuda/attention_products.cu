// The row kernels and layout changes of attention as products (attention_products.h).
#include "backends/cuda/attention_products.h"
#include "backends/cuda/attention_products_kernels.cuh"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/float_types.cuh"

namespace tfm::cuda {

void to_head_major(const void* x, DType dtype, int64_t batch, int64_t seq, int64_t heads,
                   int64_t head_dim, void* out, cudaStream_t stream) {
  const int64_t total = batch * seq * heads * head_dim;
  if (total == 0) return;  // a grid of 0 blocks is a launch error
  with_float_type(dtype, "attention", [&](auto type) {
    using T = typename decltype(type)::type;
    to_head_major_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), seq, heads, head_dim, total, static_cast<__nv_bfloat16*>(out));
  });
  check_launch("to_head_major");
}

void from_head_major(const float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                     void* out, DType out_dtype, cudaStream_t stream) {
  const int64_t total = batch * seq * heads * head_dim;
  if (total == 0) return;
  with_float_type(out_dtype, "from_head_major", [&](auto type) {
    using Out = typename decltype(type)::type;
    from_head_major_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        x, seq, heads, head_dim, total, static_cast<Out*>(out));
  });
  check_launch("from_head_major");
}

void masked_softmax(float* scores, void* probs, const int32_t* mask, const int32_t* slots,
                    int64_t batch, int64_t heads, int64_t seq, int64_t len, int64_t ld, float scale,
                    int64_t window, cudaStream_t stream) {
  const int64_t rows = batch * heads * seq;
  if (rows == 0 || len == 0) return;
  masked_softmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      scores, static_cast<__nv_bfloat16*>(probs), mask, slots, heads, seq, len, ld, scale, window);
  check_launch("masked_softmax");
}

void softmax_grad(const float* probs, const float* d_probs, int64_t rows, int64_t len, int64_t ld,
                  float scale, void* d_scores, cudaStream_t stream) {
  if (rows == 0 || len == 0) return;
  softmax_grad_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      probs, d_probs, len, ld, scale, static_cast<__nv_bfloat16*>(d_scores));
  check_launch("softmax_grad");
}

}  // namespace tfm::cuda
