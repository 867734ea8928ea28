#include "backends/cpu/attention_gemm.h"

#include <dnnl.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/simd.h"

namespace tfm::cpu {

bool gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  return dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == dnnl_success;
}

bool attention_probs(const float* q, const float* k, const int32_t* row_mask, const int32_t* slots,
                     const HeadView& v, float* probs) {
  if (!gemm('N', 'T', v.seq, v.len, v.head_dim, v.scale, q, v.q_stride, k, v.kv_stride, 0.f, probs,
            v.len)) {
    return false;
  }
  for (int64_t i = 0; i < v.seq; ++i) {
    float* row = probs + i * v.len;
    const int64_t visible_end = std::min<int64_t>(slots[i] + 1, v.len);
    float max_score = -INFINITY;
    for (int64_t j = 0; j < visible_end; ++j) {
      if (row_mask[j] != 0) max_score = std::max(max_score, row[j]);
    }
    simd::map(row, row, v.len,
              [max_score](simd::Vec x) { return simd::exp(x - simd::broadcast(max_score)); });
    float denom = 0.f;
    for (int64_t j = 0; j < v.len; ++j) {
      if (j >= visible_end || row_mask[j] == 0 || max_score == -INFINITY) row[j] = 0.f;
      denom += row[j];
    }
    const float inv = denom > 0.f ? 1.f / denom : 0.f;
    for (int64_t j = 0; j < v.len; ++j) row[j] *= inv;
  }
  return true;
}

}  // namespace tfm::cpu
