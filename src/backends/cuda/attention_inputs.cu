// What attention reads of a step's new tokens (graph::Op::kPrepareAttention) in one launch: one
// warp per head of each token, over q's heads, then k's, then v's.
#include "backends/cuda/attention_inputs_kernel.cuh"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/overlapped_launch.h"
#include "tfm/error.h"

namespace tfm::cuda {

void prepare_attention(const AttentionInputs& in, const AttentionShape& shape, float eps,
                       float attention_scaling, void* k_cache, void* v_cache, DType cache_dtype,
                       float* q_out, cudaStream_t stream) {
  if (cache_dtype != DType::f32 && cache_dtype != DType::bf16) {
    throw Error("[cuda prepare_attention] a KV cache of dtype " +
                std::string(dtype_name(cache_dtype)) + " is not supported (f32, bf16)");
  }
  const int64_t warps = shape.batch * shape.seq * (shape.q_heads + 2 * shape.kv_heads);
  if (warps == 0) return;  // a grid of 0 blocks is a launch error
  const Params p{in, eps, attention_scaling, shape, q_out};
  const int blocks = blocks_for(warps * 32, kThreads);
  if (cache_dtype == DType::bf16) {
    launch_overlapped("prepare_attention", prepare_attention_kernel<__nv_bfloat16>, blocks,
                      kThreads, 0, stream, p, static_cast<__nv_bfloat16*>(k_cache),
                      static_cast<__nv_bfloat16*>(v_cache));
  } else {
    launch_overlapped("prepare_attention", prepare_attention_kernel<float>, blocks, kThreads, 0,
                      stream, p, static_cast<float*>(k_cache), static_cast<float*>(v_cache));
  }
  check_launch("prepare_attention");
}

}  // namespace tfm::cuda
