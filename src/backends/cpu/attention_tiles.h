// Attention of many queries (prefill) over a bf16 KV cache on packed_product() (AMX tiles, or
// AVX512_BF16's dot products), as torch's CPU flash attention computes it in bf16: q rounded to
// bf16, scores q k^T summed in f32, softmax in f32, the unnormalized weights rounded to bf16 for
// their product with v, the output scaled by 1 / their sum. Each (batch, KV head)'s keys and values
// are packed once a call (packed_products.h) for all its query blocks; each (batch, query head,
// block of queries) is one task.
#pragma once

#include <cstdint>

#include "backends/cpu/attention_gemm.h"

namespace tfm::cpu {

// out (rows view.q_stride apart, as q) = attention of q (f32) over k and v ([batch, len, kv_heads,
// head_dim] bf16), under mask [batch, len] and slots [seq]. Only where packed_product() is not
// null.
void attention_bf16_on_tiles(const float* q, const uint16_t* k, const uint16_t* v,
                             const int32_t* mask, const int32_t* slots, int64_t batch,
                             int64_t q_heads, int64_t kv_heads, const HeadView& view, float* out);

}  // namespace tfm::cpu
