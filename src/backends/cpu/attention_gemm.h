// Attention over f32 keys and values as matrix products, one (batch, query head) at a time: the
// scores of a block of queries against every key in one sgemm, then probabilities in place. For
// many queries (prefill, training) this beats per-key dot products several times over.
#pragma once

#include <cstdint>
#include <vector>

namespace tfm::cpu {

// Where one (batch, query head) reads its operands: rows of q/out (and dy/dq) are q_stride floats
// apart, rows of k/v kv_stride.
struct HeadView {
  int64_t seq, len, head_dim, q_stride, kv_stride;
  float scale;
  int64_t window = 0;  // sliding window: query i sees keys after slots[i] - window only
};

// The first key query slot `last` sees: 0, or the start of its sliding window.
inline int64_t first_visible_key(int64_t last, int64_t window) {
  return window > 0 && last - window + 1 > 0 ? last - window + 1 : 0;
}

// Row-major C = alpha op(A) op(B) + beta C with oneDNN; inside a parallel region it runs on the
// calling thread. Returns false when oneDNN reports a failure (callers throw outside the region).
bool gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Queries [first, first + rows) of one head and the keys they can see, [0, keys): splitting the
// queries into blocks that stop at their last visible key skips most of the causal upper triangle.
struct QueryBlock {
  int64_t first, rows, keys;
};
std::vector<QueryBlock> query_blocks(const int32_t* slots, int64_t seq, int64_t len);

// probs [block.rows, block.keys] = softmax over the keys query i sees (j <= slots[i] and
// row_mask[j], inside its window) of the scaled scores q k^T; zeros elsewhere, and an all-zero row
// for a query that sees no key. `q` points at the head's first query.
bool attention_probs(const float* q, const float* k, const int32_t* row_mask, const int32_t* slots,
                     const HeadView& view, const QueryBlock& block, float* probs);

}  // namespace tfm::cpu
