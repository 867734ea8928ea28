// Prefill attention over a bf16 cache, flash-style on tensor cores: a block takes 64 queries of
// one head (16 per warp) and walks the cache in tiles of 64 keys, each tile's scores and its
// probabilities times the values as bf16 WMMA products with f32 accumulation, the softmax kept
// online per query row. Scores are never written to global memory and nothing needs merging.
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/flash_attention_kernel.cuh"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

template <int D>
void launch(const float* q, const void* k, const void* v, const int32_t* mask, const int32_t* slots,
            const AttentionShape& s, float scale, float* out, cudaStream_t stream) {
  constexpr size_t bytes = Layout<D>::total;
  TFM_CUDA(cudaFuncSetAttribute(flash_attention_kernel<D>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((s.seq + kBlockRows - 1) / kBlockRows),
                  static_cast<unsigned>(s.q_heads), static_cast<unsigned>(s.batch));
  flash_attention_kernel<D><<<grid, kWarps * 32, bytes, stream>>>(
      q, static_cast<const __nv_bfloat16*>(k), static_cast<const __nv_bfloat16*>(v), mask, slots, s,
      scale, out);
}

}  // namespace

bool flash_attention_applies(const AttentionShape& shape, DType kv_dtype) {
  const int64_t d = shape.head_dim;
  return kv_dtype == DType::bf16 && shape.seq > 1 && (d == 16 || d == 32 || d == 64 || d == 128);
}

void flash_attention(const float* q, const void* k, const void* v, const int32_t* mask,
                     const int32_t* slots, const AttentionShape& shape, float scale, float* out,
                     cudaStream_t stream) {
  // The tiles are read 16 bytes at a time.
  if (reinterpret_cast<uintptr_t>(k) % 16 != 0 || reinterpret_cast<uintptr_t>(v) % 16 != 0) {
    throw Error("[cuda attention] the KV cache is not 16-byte aligned");
  }
  switch (shape.head_dim) {
    case 16:
      launch<16>(q, k, v, mask, slots, shape, scale, out, stream);
      break;
    case 32:
      launch<32>(q, k, v, mask, slots, shape, scale, out, stream);
      break;
    case 64:
      launch<64>(q, k, v, mask, slots, shape, scale, out, stream);
      break;
    case 128:
      launch<128>(q, k, v, mask, slots, shape, scale, out, stream);
      break;
    default:
      throw Error("[cuda attention] flash attention has no kernel for head_dim " +
                  std::to_string(shape.head_dim));
  }
  check_launch("flash_attention");
}

}  // namespace tfm::cuda
