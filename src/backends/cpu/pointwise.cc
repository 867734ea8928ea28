// Row-wise and element-wise kernels: memory bound, parallel over rows or blocks.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd.h"
#include "tfm/error.h"

namespace tfm::cpu {

void embedding(const void* table, DType table_dtype, int64_t vocab, int64_t hidden,
               const int32_t* ids, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw Error("[embedding] token id " + std::to_string(ids[i]) + " outside the vocabulary (" +
                  std::to_string(vocab) + " tokens)");
    }
  }
#pragma omp parallel for schedule(static) if (count * hidden > kParallelMinElements)
  for (int64_t i = 0; i < count; ++i) {
    const auto offset = static_cast<size_t>(ids[i] * hidden);
    convert_elements(static_cast<const char*>(table) + offset * dtype_size(table_dtype),
                     table_dtype, out + i * hidden, DType::f32, static_cast<size_t>(hidden));
  }
}

void add_into(float* acc, const float* x, int64_t count) {
#pragma omp parallel for schedule(static) if (count > kParallelMinElements)
  for (int64_t i = 0; i < count; ++i) acc[i] += x[i];
}

void embedding_shard(const void* table, DType table_dtype, int64_t rows, int64_t hidden,
                     int64_t first_id, const int32_t* ids, int64_t count, float* out) {
  const size_t elem = dtype_size(table_dtype);
#pragma omp parallel for schedule(static) if (count * hidden > kParallelMinElements)
  for (int64_t i = 0; i < count; ++i) {
    const int64_t row = ids[i] - first_id;
    if (row < 0 || row >= rows) {
      std::fill(out + i * hidden, out + (i + 1) * hidden, 0.f);
      continue;
    }
    convert_elements(static_cast<const char*>(table) + static_cast<size_t>(row * hidden) * elem,
                     table_dtype, out + i * hidden, DType::f32, static_cast<size_t>(hidden));
  }
}

void sum_replica_block(const float* gathered, size_t count, int64_t first, int64_t ranks,
                       float* out) {
  std::fill(out, out + count, 0.f);
  for (int64_t r = first; r < first + ranks; ++r) {
    const float* src = gathered + static_cast<size_t>(r) * count;
    for (size_t i = 0; i < count; ++i) out[i] += src[i];
  }
}

void interleave_gathered(const float* gathered, int64_t rows, int64_t n, int ranks, float* out) {
  for (int r = 0; r < ranks; ++r) {
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(out + (i * ranks + r) * n, gathered + (r * rows + i) * n,
                  static_cast<size_t>(n) * sizeof(float));
    }
  }
}

void rms_norm(const float* x, const float* w, int64_t rows, int64_t hidden, float eps, float* out) {
#pragma omp parallel for schedule(static) if (rows * hidden > kParallelMinElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * hidden;
    float sum_sq = 0.f;
    // In vectors: a single sum's chain of adds left a 32-row decode step's norms serial and slow.
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t i = 0; i < hidden; ++i) sum_sq += row[i] * row[i];
    const float inv_rms = 1.f / std::sqrt(sum_sq / static_cast<float>(hidden) + eps);
    float* o = out + r * hidden;
    for (int64_t i = 0; i < hidden; ++i) o[i] = w[i] * (row[i] * inv_rms);
  }
}

void TokenRotation::check(int64_t head_dim) {
  if (head_dim / 2 > kMaxHalf) {
    throw Error("[rope] head_dim " + std::to_string(head_dim) + " is over the cpu kernels' " +
                std::to_string(2 * kMaxHalf));
  }
}

void TokenRotation::set(int32_t position, const float* inv_freq, int64_t head_dim,
                        float attention_scaling, float direction) {
  half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    // The angle is formed in f32 as PyTorch does, so large positions round the same way.
    const float angle = static_cast<float>(position) * inv_freq[i];
    cos[i] = std::cos(angle) * attention_scaling;
    sin[i] = std::sin(angle) * attention_scaling * direction;
  }
}

void TokenRotation::apply(const float* in, float* out) const {
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = in[i], x2 = in[i + half];
    out[i] = x1 * cos[i] - x2 * sin[i];
    out[i + half] = x2 * cos[i] + x1 * sin[i];
  }
}

namespace {

// direction +1 rotates by the angle (the forward op), -1 by minus the angle (its gradient).
void rotate(const float* x, const int32_t* positions, const float* inv_freq, int64_t batch,
            int64_t seq, int64_t heads, int64_t head_dim, float attention_scaling, float direction,
            float* out) {
  TokenRotation::check(head_dim);
#pragma omp parallel for collapse(2) \
    schedule(static) if (batch * seq * heads * head_dim > kParallelMinElements)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      TokenRotation rotation;
      rotation.set(positions[b * seq + s], inv_freq, head_dim, attention_scaling, direction);
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t at = ((b * seq + s) * heads + h) * head_dim;
        rotation.apply(x + at, out + at);
      }
    }
  }
}

}  // namespace

void rope(const float* x, const int32_t* positions, const float* inv_freq, int64_t batch,
          int64_t seq, int64_t heads, int64_t head_dim, float attention_scaling, float* out) {
  rotate(x, positions, inv_freq, batch, seq, heads, head_dim, attention_scaling, 1.f, out);
}

void rope_grad(const float* dy, const int32_t* positions, const float* inv_freq, int64_t batch,
               int64_t seq, int64_t heads, int64_t head_dim, float attention_scaling, float* dx) {
  rotate(dy, positions, inv_freq, batch, seq, heads, head_dim, attention_scaling, -1.f, dx);
}

void embedding_grad(const float* dy, const int32_t* ids, int64_t count, int64_t vocab,
                    int64_t hidden, float* d_table, const VocabShard* shard, bool accumulate) {
  if (!accumulate) std::fill(d_table, d_table + vocab * hidden, 0.f);
  const int64_t first = shard ? shard->first_id : 0;
  // Tokens repeat, so rows are accumulated in token order on one thread: deterministic sums.
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = ids[i] - first;
    if (shard && (id < 0 || id >= vocab)) continue;
    TFM_CHECK(id >= 0 && id < vocab, "[embedding_grad] token id outside the vocabulary");
    float* row = d_table + id * hidden;
    for (int64_t h = 0; h < hidden; ++h) row[h] += dy[i * hidden + h];
  }
}

void cast(const void* x, DType from, void* out, DType to, size_t count) {
  constexpr size_t kChunk = 1 << 16;
  const auto chunks = static_cast<int64_t>((count + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kChunk, n = std::min(kChunk, count - begin);
    convert_elements(static_cast<const char*>(x) + begin * dtype_size(from), from,
                     static_cast<char*>(out) + begin * dtype_size(to), to, n);
  }
}

void slice_seq(const float* x, int64_t batch, int64_t seq, int64_t inner, int64_t start,
               int64_t length, float* out) {
  for (int64_t b = 0; b < batch; ++b) {
    std::memcpy(out + b * length * inner, x + (b * seq + start) * inner,
                static_cast<size_t>(length * inner) * sizeof(float));
  }
}

namespace {

// std::max_element's index (the first of equal largest values; a NaN is never larger, so a row
// that starts with one gives 0), from vector maxima of blocks, then a scan of the first block that
// holds the largest: std::max_element's chain of compares took 0.3 ms over Qwen3's 151936 logits,
// a decode step's greedy pick.
int64_t argmax_row(const float* row, int64_t n) {
  if (std::isnan(row[0])) return 0;
  constexpr int64_t kBlock = 1024;
  float best = row[0];
  int64_t best_block = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = std::min(n, b + kBlock);
    // max(load, m) keeps m where the load is NaN; m starts at row[0], which is not.
    simd::Vec m = simd::broadcast(row[0]);
    int64_t i = b;
    for (; i + simd::kWidth <= end; i += simd::kWidth) m = simd::max(simd::load(row + i), m);
    float block_max = simd::max_of(m);
    for (; i < end; ++i) block_max = row[i] > block_max ? row[i] : block_max;
    if (block_max > best) best = block_max, best_block = b;
  }
  int64_t i = best_block;
  while (row[i] != best) ++i;
  return i;
}

}  // namespace

void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out) {
#pragma omp parallel for schedule(static) if (rows * n > kParallelMinElements)
  for (int64_t r = 0; r < rows; ++r) out[r] = static_cast<int32_t>(argmax_row(x + r * n, n));
}

}  // namespace tfm::cpu
