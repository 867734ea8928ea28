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

namespace {

// The loops below keep kLanes independent partial results so that the compiler turns them into
// vector code: one running max or sum would chain every key's step to the one before.
constexpr int64_t kLanes = 16;

// Over keys [begin, end) of one query's scores: the largest among those row_mask keeps (-inf where
// it keeps none).
float masked_max(const float* scores, const int32_t* row_mask, int64_t begin, int64_t end) {
  float lanes[kLanes];
  std::fill_n(lanes, kLanes, -INFINITY);
  for (int64_t j = begin; j < end; j += kLanes) {
    const int64_t n = std::min(kLanes, end - j);
    for (int64_t l = 0; l < n; ++l) {
      const float x = scores[j + l];
      lanes[l] = row_mask[j + l] != 0 && x > lanes[l] ? x : lanes[l];
    }
  }
  return *std::max_element(lanes, lanes + kLanes);
}

// weights[j] = 0 over [begin, end) where row_mask drops key j; returns the sum of them all.
float masked_sum(float* weights, const int32_t* row_mask, int64_t begin, int64_t end) {
  float lanes[kLanes] = {};
  for (int64_t j = begin; j < end; j += kLanes) {
    const int64_t n = std::min(kLanes, end - j);
    for (int64_t l = 0; l < n; ++l) {
      const float x = row_mask[j + l] != 0 ? weights[j + l] : 0.f;
      weights[j + l] = x;
      lanes[l] += x;
    }
  }
  float sum = 0.f;
  for (const float x : lanes) sum += x;
  return sum;
}

// One query's scores against keys [0, keys) into unnormalized weights exp(score - max) over the
// keys it sees ([begin, end), kept by row_mask), 0 elsewhere. Returns 1 / their sum, or 0 where
// the query sees no key.
float exponentiate_visible(float* row, const int32_t* row_mask, int64_t begin, int64_t end,
                           int64_t keys) {
  std::fill(row, row + begin, 0.f);
  std::fill(row + end, row + keys, 0.f);
  const float max_score = masked_max(row, row_mask, begin, end);
  if (max_score == -INFINITY) {
    std::fill(row + begin, row + end, 0.f);
    return 0.f;
  }
  vector_kernels().exp_shifted(row + begin, row + begin, end - begin, max_score, 1.f);
  return 1.f / masked_sum(row, row_mask, begin, end);
}

}  // namespace

bool attention_probs(const float* q, const float* k, const int32_t* row_mask, const int32_t* slots,
                     const HeadView& v, const QueryBlock& block, float* probs) {
  const int64_t keys = block.keys;
  if (!gemm('N', 'T', block.rows, keys, v.head_dim, v.scale, q + block.first * v.q_stride,
            v.q_stride, k, v.kv_stride, 0.f, probs, keys)) {
    return false;
  }
  for (int64_t i = 0; i < block.rows; ++i) {
    float* row = probs + i * keys;
    const int64_t end = std::min<int64_t>(slots[block.first + i] + 1, keys);
    const int64_t begin = first_visible_key(slots[block.first + i], v.window);
    const float inv = exponentiate_visible(row, row_mask, begin, end, keys);
    for (int64_t j = begin; j < end; ++j) row[j] *= inv;
  }
  return true;
}

}  // namespace tfm::cpu
