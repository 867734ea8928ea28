// Attention's backward pass over f32 q, k, v (training keeps no KV cache). With p the softmax of
// the scaled scores of one query and dP_j = dy . v_j:
//   dS_j = p_j (dP_j - sum_i p_i dP_i),  dq = scale sum_j dS_j k_j,
//   dk_j += scale dS_j q,  dv_j += p_j dy.
// A thread owns one (batch, kv head): every query head of its group writes only its dk and dv.
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd.h"

namespace tfm::cpu {

void attention_grad(const float* q, const float* k, const float* v, const int32_t* mask,
                    const int32_t* slots, const float* dy, int64_t batch, int64_t seq,
                    int64_t len, int64_t q_heads, int64_t kv_heads, int64_t head_dim, float scale,
                    float* out) {
  const int64_t group = q_heads / kv_heads;
  const int64_t q_numel = batch * seq * q_heads * head_dim, kv_numel = batch * len * kv_heads * head_dim;
  float* dq = out;
  float* dk = out + q_numel;
  float* dv = dk + kv_numel;
  std::memset(dk, 0, static_cast<size_t>(2 * kv_numel) * sizeof(float));
#pragma omp parallel for collapse(2) schedule(dynamic) \
    if (batch * seq * q_heads * len * head_dim > kParallelMinElements)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
      std::vector<float> p(static_cast<size_t>(len)), dp(static_cast<size_t>(len));
      const int32_t* row_mask = mask + b * len;
      const auto kv_row = [&](const float* base, int64_t j) {
        return base + ((b * len + j) * kv_heads + kvh) * head_dim;
      };
      for (int64_t s = 0; s < seq; ++s) {
        const int64_t visible_end = std::min<int64_t>(slots[s] + 1, len);
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          const int64_t at = ((b * seq + s) * q_heads + h) * head_dim;
          const float* qv = q + at;
          const float* dyv = dy + at;
          float* dqv = dq + at;
          std::fill(dqv, dqv + head_dim, 0.f);
          float max_score = -INFINITY;
          for (int64_t j = 0; j < visible_end; ++j) {
            if (row_mask[j] == 0) continue;
            p[j] = simd::dot(qv, kv_row(k, j), head_dim) * scale;
            max_score = std::max(max_score, p[j]);
          }
          if (max_score == -INFINITY) continue;  // a padding query saw no key: no gradient
          float denom = 0.f;
          for (int64_t j = 0; j < visible_end; ++j) {
            if (row_mask[j] == 0) continue;
            p[j] = std::exp(p[j] - max_score);
            denom += p[j];
          }
          float p_dot_dp = 0.f;
          for (int64_t j = 0; j < visible_end; ++j) {
            if (row_mask[j] == 0) continue;
            p[j] /= denom;
            dp[j] = simd::dot(dyv, kv_row(v, j), head_dim);
            p_dot_dp += p[j] * dp[j];
          }
          for (int64_t j = 0; j < visible_end; ++j) {
            if (row_mask[j] == 0) continue;
            const float ds = p[j] * (dp[j] - p_dot_dp) * scale;
            simd::axpy(ds, kv_row(k, j), dqv, head_dim);
            simd::axpy(ds, qv, dk + (kv_row(k, j) - k), head_dim);
            simd::axpy(p[j], dyv, dv + (kv_row(v, j) - v), head_dim);
          }
        }
      }
    }
  }
}

}  // namespace tfm::cpu
