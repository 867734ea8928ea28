// Attention's backward pass over f32 q, k, v (training keeps no KV cache), one (batch, query head)
// at a time as matrix products. With P the softmax of the scaled scores and dP = dy v^T:
//   dS = P * (dP - rowsum(P * dP)),  dq = scale dS k,  dk += scale dS^T q,  dv += P^T dy.
// A thread owns one (batch, kv head): every query head of its group adds into only its dk and dv.
#include <cstring>
#include <vector>

#include "backends/cpu/attention_gemm.h"
#include "backends/cpu/kernels.h"
#include "tfm/error.h"

namespace tfm::cpu {

void attention_grad(const float* q, const float* k, const float* v, const int32_t* mask,
                    const int32_t* slots, const float* dy, int64_t batch, int64_t seq, int64_t len,
                    int64_t q_heads, int64_t kv_heads, int64_t head_dim, float scale, float* out,
                    int64_t window) {
  const int64_t group = q_heads / kv_heads;
  const HeadView view{seq, len, head_dim, q_heads * head_dim, kv_heads * head_dim, scale, window};
  const int64_t q_numel = batch * seq * view.q_stride, kv_numel = batch * len * view.kv_stride;
  float* dq = out;
  float* dk = out + q_numel;
  float* dv = dk + kv_numel;
  std::memset(dk, 0, static_cast<size_t>(2 * kv_numel) * sizeof(float));
  const std::vector<QueryBlock> blocks = query_blocks(slots, seq, len);
  bool ok = true;
#pragma omp parallel if (batch * seq * q_heads * len * head_dim > kParallelMinElements) \
    reduction(&& : ok)
  {
    std::vector<float> probs(static_cast<size_t>(seq * len)), dscores(probs.size());
    float* p = probs.data();
    float* ds = dscores.data();
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
        const int64_t kv_at = b * len * view.kv_stride + kvh * head_dim;
        for (int64_t h = kvh * group; h < (kvh + 1) * group && ok; ++h) {
          const int64_t q_at = b * seq * view.q_stride + h * head_dim;
          for (const QueryBlock& blk : blocks) {
            const int64_t rows = blk.rows, keys = blk.keys;
            const int64_t at = q_at + blk.first * view.q_stride;
            ok = ok && attention_probs(q + q_at, k + kv_at, mask + b * len, slots, view, blk, p) &&
                 gemm('N', 'T', rows, keys, head_dim, 1.f, dy + at, view.q_stride, v + kv_at,
                      view.kv_stride, 0.f, ds, keys);
            for (int64_t i = 0; i < rows && ok; ++i) {
              const float* pi = p + i * keys;
              float* di = ds + i * keys;
              float row_dot = 0.f;
              for (int64_t j = 0; j < keys; ++j) row_dot += pi[j] * di[j];
              for (int64_t j = 0; j < keys; ++j) di[j] = pi[j] * (di[j] - row_dot);
            }
            ok = ok &&
                 gemm('N', 'N', rows, head_dim, keys, scale, ds, keys, k + kv_at, view.kv_stride,
                      0.f, dq + at, view.q_stride) &&
                 gemm('T', 'N', keys, head_dim, rows, scale, ds, keys, q + at, view.q_stride, 1.f,
                      dk + kv_at, view.kv_stride) &&
                 gemm('T', 'N', keys, head_dim, rows, 1.f, p, keys, dy + at, view.q_stride, 1.f,
                      dv + kv_at, view.kv_stride);
          }
        }
      }
    }
  }
  if (!ok) throw Error("[attention_grad] oneDNN sgemm failed");
}

}  // namespace tfm::cpu
