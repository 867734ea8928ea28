// What attention reads of a step's new tokens (graph::Op::kPrepareAttention) in one launch: one
// warp per head of each token, over q's heads, then k's, then v's.
#include "backends/cuda/attention_inputs_kernel.cuh"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/float_types.cuh"
#include "backends/cuda/overlapped_launch.h"

namespace tfm::cuda {

void prepare_attention(const AttentionInputs& in, const AttentionShape& shape, float eps,
                       float attention_scaling, void* k_cache, void* v_cache, DType cache_dtype,
                       float* q_out, cudaStream_t stream) {
  const int64_t warps = shape.batch * shape.seq * (shape.q_heads + 2 * shape.kv_heads);
  if (warps == 0) return;  // a grid of 0 blocks is a launch error
  const Params p{in, eps, attention_scaling, shape, q_out};
  const int blocks = blocks_for(warps * 32, kThreads);
  with_float_type(cache_dtype, "prepare_attention", [&](auto type) {
    using T = typename decltype(type)::type;
    launch_overlapped("prepare_attention", prepare_attention_kernel<T>, blocks, kThreads, 0, stream,
                      p, static_cast<T*>(k_cache), static_cast<T*>(v_cache));
  });
  check_launch("prepare_attention");
}

}  // namespace tfm::cuda
