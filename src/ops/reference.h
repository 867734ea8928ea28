// The slow scalar meaning of each op, in double precision over contiguous f32 buffers. Backend
// kernels are tested against these; nothing on a hot path calls them.
#pragma once

#include <cstdint>

#include "graph/graph.h"

namespace tfm::ops::reference {

void embedding(const float* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t count,
               float* out);
// out[m, n] = sum_k x[m, k] * w[n, k] + bias[n]
void linear(const float* x, const float* w, const float* bias, int64_t m, int64_t n, int64_t k,
            float* out);
void rms_norm(const float* x, const float* w, int64_t rows, int64_t hidden, float eps, float* out);
void rope(const float* x, const int32_t* positions, const float* inv_freq, int64_t batch,
          int64_t seq, int64_t heads, int64_t head_dim, float attention_scaling, float* out);
void cache_write(float* cache, const float* update, const int32_t* slots, int64_t batch,
                 int64_t cache_len, int64_t seq, int64_t row_elems);
void attention(const float* q, const float* k, const float* v, const int32_t* mask,
               const int32_t* slots, int64_t batch, int64_t seq, int64_t cache_len, int64_t q_heads,
               int64_t kv_heads, int64_t head_dim, float scale, float* out, int64_t window = 0);
// The summed loss over rows whose target is not graph::kIgnoreIndex.
double cross_entropy(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab);
void elementwise(const graph::ElementwiseProgram& program, const float* const* inputs,
                 int64_t count, float* out);

}  // namespace tfm::ops::reference
