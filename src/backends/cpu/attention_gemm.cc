#include "backends/cpu/attention_gemm.h"

#include <dnnl.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/vector_kernels.h"

namespace tfm::cpu {

bool gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  return dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == dnnl_success;
}

std::vector<QueryBlock> query_blocks(const int32_t* slots, int64_t seq, int64_t len) {
  constexpr int64_t kRows = 64;  // small enough to skip the triangle, large enough for sgemm
  std::vector<QueryBlock> blocks;
  for (int64_t first = 0; first < seq; first += kRows) {
    const int64_t rows = std::min(kRows, seq - first);
    const int32_t last = *std::max_element(slots + first, slots + first + rows);
    blocks.push_back({first, rows, std::clamp<int64_t>(int64_t{last} + 1, 1, len)});
  }
  return blocks;
}

bool attention_probs(const float* q, const float* k, const int32_t* row_mask, const int32_t* slots,
                     const HeadView& v, const QueryBlock& block, float* probs) {
  const int64_t keys = block.keys;
  if (!gemm('N', 'T', block.rows, keys, v.head_dim, v.scale, q + block.first * v.q_stride,
            v.q_stride, k, v.kv_stride, 0.f, probs, keys)) {
    return false;
  }
  for (int64_t i = 0; i < block.rows; ++i) {
    float* row = probs + i * keys;
    const int64_t visible_end = std::min<int64_t>(slots[block.first + i] + 1, keys);
    const int64_t begin = first_visible_key(slots[block.first + i], v.window);
    float max_score = -INFINITY;
    for (int64_t j = begin; j < visible_end; ++j) {
      if (row_mask[j] != 0) max_score = std::max(max_score, row[j]);
    }
    vector_kernels().exp_shifted(row, row, keys, max_score, 1.f);
    float denom = 0.f;
    for (int64_t j = 0; j < keys; ++j) {
      if (j < begin || j >= visible_end || row_mask[j] == 0 || max_score == -INFINITY) row[j] = 0.f;
      denom += row[j];
    }
    const float inv = denom > 0.f ? 1.f / denom : 0.f;
    for (int64_t j = 0; j < keys; ++j) row[j] *= inv;
  }
  return true;
}

}  // namespace tfm::cpu
