// Attention's forward and backward steps as batched tensor-core products. In head-major layout the
// g = q_heads / kv_heads query heads of one KV head are one [g x seq, head_dim] matrix, so each
// product is one strided batch over a chunk's KV heads, and the sums over a group (dk, dv) happen
// inside the products.
#include "backends/cuda/attention_product_steps.h"

#include <initializer_list>
#include <memory>

#include "backends/cuda/attention_products.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/matmul.h"
#include "fusion/plan.h"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

// Scores of at most this many bytes exist at once (unless one batch row alone needs more).
constexpr int64_t kScoresBudgetBytes = int64_t{256} << 20;

constexpr int64_t kBf16 = 2, kF32 = 4;

// The largest power of two, at most 256, that divides every byte count.
uint32_t alignment_of(std::initializer_list<int64_t> bytes) {
  uint32_t alignment = 256;
  for (const int64_t b : bytes) {
    while (b % alignment != 0) alignment /= 2;
  }
  return alignment;
}

// A row of scores, padded to 8 elements (16-byte aligned rows).
int64_t score_row_elems(const AttentionShape& s) { return (s.cache_len + 7) / 8 * 8; }

// The f32 scores of one batch row.
int64_t batch_row_score_bytes(const AttentionShape& s) {
  return s.q_heads * s.seq * score_row_elems(s) * kF32;
}

// The sizes of one pass over `chunk` batch rows, and where each buffer sits in scratch.
struct Layout {
  AttentionShape s{};
  int64_t chunk = 1;
  int64_t group_rows = 0;  // query rows of one KV head's group: q_heads / kv_heads x seq
  int64_t score_ld = 0;    // a row of scores, padded to 8 elements (16-byte aligned rows)
  int64_t q_elems = 0, kv_elems = 0, score_elems = 0;  // per chunk, head-major
  // Byte offsets into scratch.
  size_t q16 = 0, k16 = 0, v16 = 0, scores = 0, probs = 0, out = 0;  // both passes
  size_t dy16 = 0, d_probs = 0, dk = 0, dv = 0;                      // backward only
  size_t bytes = 0;

  Layout(const AttentionShape& shape, bool backward) : s(shape) {
    group_rows = s.q_heads / s.kv_heads * s.seq;
    score_ld = score_row_elems(s);
    const int64_t row_scores = batch_row_score_bytes(s);
    // The largest divisor of the batch whose scores fit the budget: every pass runs the same
    // products.
    for (int64_t c = s.batch; c >= 1; --c) {
      if (s.batch % c == 0 && (c * row_scores <= kScoresBudgetBytes || c == 1)) {
        chunk = c;
        break;
      }
    }
    q_elems = chunk * s.q_heads * s.seq * s.head_dim;
    kv_elems = chunk * s.kv_heads * s.cache_len * s.head_dim;
    score_elems = chunk * s.q_heads * s.seq * score_ld;
    const auto take = [this](int64_t count) {
      const size_t at = bytes;
      const auto aligned =
          static_cast<size_t>((count + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment);
      bytes += aligned;
      return at;
    };
    q16 = take(q_elems * kBf16);
    k16 = take(kv_elems * kBf16);
    v16 = take(kv_elems * kBf16);
    scores = take(score_elems * kF32);
    probs = take(score_elems * kBf16);
    out = take(q_elems * kF32);  // forward: the output; backward: dq, both head-major
    if (backward) {
      dy16 = take(q_elems * kBf16);
      d_probs = take(score_elems * kF32);
      dk = take(kv_elems * kF32);
      dv = take(kv_elems * kF32);
    }
  }

  // Operands of the strided batches over a chunk's KV heads, as each product reads them.
  MatmulOperand queries(int64_t elem, bool transposed = false) const {  // [group_rows, head_dim]
    return {transposed, alignment_of({group_rows * s.head_dim * elem, s.head_dim * elem}),
            s.head_dim, group_rows * s.head_dim};
  }
  MatmulOperand keys(int64_t elem, bool transposed = false) const {  // [len, head_dim]
    const int64_t matrix = s.cache_len * s.head_dim;
    return {transposed, alignment_of({matrix * elem, s.head_dim * elem}), s.head_dim, matrix};
  }
  MatmulOperand scores_of(int64_t elem, bool transposed = false) const {  // [group_rows, len]
    return {transposed, alignment_of({group_rows * score_ld * elem, score_ld * elem}), score_ld,
            group_rows * score_ld};
  }
  int64_t batch() const { return chunk * s.kv_heads; }
};

template <typename T>
T* at(void* scratch, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(scratch) + offset);
}

struct Operands {
  size_t q, k, v, mask, slots;
};

// An attention's operands, or its gradient's forward ones.
graph::AttentionArgs attention_of(const graph::Node& n) {
  return n.op == graph::Op::kAttention ? graph::attention_args(n)
                                       : graph::attention_operands(graph::attention_grad_args(n));
}

Operands operands_of(const graph::Node& n) {
  const graph::AttentionArgs a = attention_of(n);
  return {slot(a.q), slot(a.k), slot(a.v), slot(a.mask), slot(a.slots)};
}

void check_bf16(const graph::Graph& graph, const graph::Node& n, const char* op) {
  const graph::AttentionArgs a = attention_of(n);
  for (graph::ValueId x : {a.q, a.k, a.v}) {
    if (node_of(graph, x).dtype != DType::bf16) {
      throw Error(std::string("[cuda ") + op + "] q, k and v must all be bf16 (autocast), got " +
                  std::string(dtype_name(node_of(graph, x).dtype)));
    }
  }
}

// Brings a chunk's q, k and v into head-major bf16 and computes scores = q k^T (per KV head, over
// its group's query rows), then the masked softmax (f32 in `scores`, bf16 in `probs`).
struct Probabilities {
  Layout l;
  std::shared_ptr<const Matmul> scores;

  explicit Probabilities(const Layout& layout)
      : l(layout),
        scores(std::make_shared<const Matmul>(l.group_rows, l.s.cache_len, l.s.head_dim,
                                              DType::bf16, l.queries(kBf16), l.keys(kBf16, true),
                                              l.scores_of(kF32), l.batch())) {}

  void run(StepContext& c, const Operands& o, int64_t first_row, float scale) const {
    const AttentionShape& s = l.s;
    const auto* q = static_cast<const char*>(c.ptrs[o.q]);
    const auto* k = static_cast<const char*>(c.ptrs[o.k]);
    const auto* v = static_cast<const char*>(c.ptrs[o.v]);
    const int64_t q_row = s.seq * s.q_heads * s.head_dim,
                  kv_row = s.cache_len * s.kv_heads * s.head_dim;
    to_head_major(q + first_row * q_row * kBf16, DType::bf16, l.chunk, s.seq, s.q_heads, s.head_dim,
                  at<char>(c.scratch, l.q16), c.stream);
    to_head_major(k + first_row * kv_row * kBf16, DType::bf16, l.chunk, s.cache_len, s.kv_heads,
                  s.head_dim, at<char>(c.scratch, l.k16), c.stream);
    to_head_major(v + first_row * kv_row * kBf16, DType::bf16, l.chunk, s.cache_len, s.kv_heads,
                  s.head_dim, at<char>(c.scratch, l.v16), c.stream);
    scores->run(at<char>(c.scratch, l.q16), at<char>(c.scratch, l.k16),
                at<float>(c.scratch, l.scores), c.workspace, c.stream);
    masked_softmax(at<float>(c.scratch, l.scores), at<char>(c.scratch, l.probs),
                   static_cast<const int32_t*>(c.ptrs[o.mask]) + first_row * s.cache_len,
                   static_cast<const int32_t*>(c.ptrs[o.slots]), l.chunk, s.q_heads, s.seq,
                   s.cache_len, l.score_ld, scale, s.window, c.stream);
  }
};

}  // namespace

size_t attention_products_scratch_bytes(const AttentionShape& shape, bool backward) {
  return Layout(shape, backward).bytes;
}

Step attention_products_step(const graph::Graph& graph, const graph::Node& n, size_t out) {
  check_bf16(graph, n, "attention");
  const Layout l(attention_shape(graph, n), false);
  const AttentionShape& s = l.s;
  const Probabilities probabilities(l);
  // out = probs v per KV head, over its group's query rows, written head-major f32.
  auto mix =
      std::make_shared<const Matmul>(l.group_rows, s.head_dim, s.cache_len, DType::bf16,
                                     l.scores_of(kBf16), l.keys(kBf16), l.queries(kF32), l.batch());
  const Operands o = operands_of(n);
  const float scale = n.scale;
  const DType out_dtype = n.dtype;
  const size_t row_bytes =
      static_cast<size_t>(s.seq * s.q_heads * s.head_dim) * dtype_size(out_dtype);
  return [=](StepContext& c) {
    for (int64_t first = 0; first < s.batch; first += l.chunk) {
      probabilities.run(c, o, first, scale);
      mix->run(at<char>(c.scratch, l.probs), at<char>(c.scratch, l.v16),
               at<float>(c.scratch, l.out), c.workspace, c.stream);
      from_head_major(at<float>(c.scratch, l.out), l.chunk, s.seq, s.q_heads, s.head_dim,
                      static_cast<char*>(c.ptrs[out]) + static_cast<size_t>(first) * row_bytes,
                      out_dtype, c.stream);
    }
  };
}

Step attention_grad_products_step(const graph::Graph& graph, const graph::Node& n, size_t out) {
  check_bf16(graph, n, "attention_grad");
  const Layout l(attention_shape(graph, n), true);
  const AttentionShape& s = l.s;
  const Probabilities probabilities(l);
  const int64_t seq = s.seq, len = s.cache_len, d = s.head_dim, rows = l.group_rows;
  const auto product = [&](int64_t m, int64_t nn, int64_t k, MatmulOperand a, MatmulOperand b,
                           MatmulOperand y) {
    return std::make_shared<const Matmul>(m, nn, k, DType::bf16, a, b, y, l.batch());
  };
  // Per KV head, over its group's query rows: dv = probs^T dy, d_probs = dy v^T,
  // dq = d_scores k, dk = d_scores^T q.
  auto dv = product(len, d, rows, l.scores_of(kBf16, true), l.queries(kBf16), l.keys(kF32));
  auto d_probs = product(rows, len, d, l.queries(kBf16), l.keys(kBf16, true), l.scores_of(kF32));
  auto dq = product(rows, d, len, l.scores_of(kBf16), l.keys(kBf16), l.queries(kF32));
  auto dk = product(len, d, rows, l.scores_of(kBf16, true), l.queries(kBf16), l.keys(kF32));
  const Operands o = operands_of(n);
  // dy f32, or bf16 (attention's output gradient under autocast).
  const graph::ValueId dy_id = graph::attention_grad_args(n).dy;
  const size_t dy = slot(dy_id);
  const DType dy_dtype = node_of(graph, dy_id).dtype;
  check_float_kind(dy_dtype, "attention_grad");
  const auto dy_bytes = static_cast<int64_t>(dtype_size(dy_dtype));
  const DType out_dtype = n.dtype;
  const auto out_bytes = static_cast<int64_t>(dtype_size(out_dtype));
  const float scale = n.scale;
  const int64_t q_row = seq * s.q_heads * d, kv_row = len * s.kv_heads * d;
  const int64_t q_total = s.batch * q_row, kv_total = s.batch * kv_row;
  return [=](StepContext& c) {
    const auto buffer = [&](size_t offset) { return at<char>(c.scratch, offset); };
    const auto f32 = [&](size_t offset) { return at<float>(c.scratch, offset); };
    for (int64_t first = 0; first < s.batch; first += l.chunk) {
      probabilities.run(c, o, first, scale);
      to_head_major(static_cast<const char*>(c.ptrs[dy]) + first * q_row * dy_bytes, dy_dtype,
                    l.chunk, seq, s.q_heads, d, buffer(l.dy16), c.stream);
      dv->run(buffer(l.probs), buffer(l.dy16), f32(l.dv), c.workspace, c.stream);
      d_probs->run(buffer(l.dy16), buffer(l.v16), f32(l.d_probs), c.workspace, c.stream);
      // The gradient of the scores, written over the bf16 probabilities (read by dv above).
      softmax_grad(f32(l.scores), f32(l.d_probs), l.chunk * s.q_heads * seq, len, l.score_ld, scale,
                   buffer(l.probs), c.stream);
      dq->run(buffer(l.probs), buffer(l.k16), f32(l.out), c.workspace, c.stream);
      dk->run(buffer(l.probs), buffer(l.q16), f32(l.dk), c.workspace, c.stream);
      // [dq | dk | dv] in the node's dtype: bf16 with bf16 dy (autocast), as torch's.
      const auto grad = [&](int64_t element) {
        return static_cast<char*>(c.ptrs[out]) + element * out_bytes;
      };
      from_head_major(f32(l.out), l.chunk, seq, s.q_heads, d, grad(first * q_row), out_dtype,
                      c.stream);
      from_head_major(f32(l.dk), l.chunk, len, s.kv_heads, d, grad(q_total + first * kv_row),
                      out_dtype, c.stream);
      from_head_major(f32(l.dv), l.chunk, len, s.kv_heads, d,
                      grad(q_total + kv_total + first * kv_row), out_dtype, c.stream);
    }
  };
}

}  // namespace tfm::cuda
