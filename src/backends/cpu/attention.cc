// Attention over a static KV cache. Each (batch, query, head) is independent; the keys a query
// sees are the valid cache slots up to its own, so one kernel serves prefill chunks and decode.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/attention_gemm.h"
#include "backends/cpu/attention_tiles.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/packed_products.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/vector_kernels.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

// A query head's scores turned in place into unnormalized weights, exp(score - max). Returns the
// max and the weights' sum, which is 0 (all weights 0) where every score is -inf. std::exp, as
// before: with exp_shifted's polynomial instead, a training run split over processes left the one
// process's losses by more than 1e-5 (distributed tests).
struct Exponentiated {
  float max, sum;
};
Exponentiated exponentiate_scores(float* p, int64_t count) {
  const float max_score = *std::max_element(p, p + count);
  if (max_score == -INFINITY) {
    std::fill_n(p, count, 0.f);
    return {max_score, 0.f};
  }
  float sum = 0.f;
  for (int64_t i = 0; i < count; ++i) {
    p[i] = std::exp(p[i] - max_score);
    sum += p[i];
  }
  return {max_score, sum};
}

// How the threads share attention's work when the queries are few (decode). Over fewer than
// kWholeRowKeys keys, each query's KV heads in `parts` contiguous groups, a thread reading its
// group's part of each cache row; over more, whole rows, each query's keys split in `pieces`,
// weighed apart and merged after. Where parts leave the threads unevenly loaded, pieces too. Up
// to kPiecesPerThread items a thread, none of fewer keys than kMinKeysPerPiece, which would cost
// more to merge than they save. Decode of Qwen3-0.6B on 2 threads (28 layers over a cold bf16
// cache, Xeon with AMX): at 81 keys 30-34 us a layer by parts against 37-40 by pieces, at 321
// keys 98-107 against 105-119, at 1001 keys 307-337 against 286-294.
constexpr int64_t kWholeRowKeys = 512, kPiecesPerThread = 4, kMinKeysPerPiece = 32;

struct WorkSplit {
  int64_t parts, pieces;
};

WorkSplit split_work(int64_t queries, int64_t kv_heads, int64_t keys) {
  const int64_t threads = omp_get_max_threads();
  const int64_t parts =
      keys < kWholeRowKeys ? std::clamp<int64_t>(threads / queries, 1, kv_heads) : 1;
  const int64_t items = queries * parts;
  if (items % threads == 0) return {parts, 1};
  return {parts, std::clamp<int64_t>(keys / kMinKeysPerPiece, 1,
                                     (kPiecesPerThread * threads + items - 1) / items)};
}

// Each piece's unnormalized output per query head, with the max and sum of its weights; each
// piece writes its own (sum 0 and no max where it has no keys) before the merge reads them.
struct Pieces {
  int64_t pieces, q_heads, head_dim;
  Scratch out, max, sum;
  Pieces(int64_t queries, int64_t pieces, int64_t q_heads, int64_t head_dim)
      : pieces(pieces),
        q_heads(q_heads),
        head_dim(head_dim),
        out(static_cast<size_t>(queries * pieces * q_heads * head_dim)),
        max(static_cast<size_t>(queries * pieces * q_heads)),
        sum(max.size()) {}

  // out = sum over pieces p of out_p exp(max_p - M) / sum over p of sum_p exp(max_p - M), M the
  // largest max of a piece with weights; 0 where no piece has any.
  void merge(int64_t query, int64_t h, float* o) const {
    float top = -INFINITY;
    for (int64_t p = 0; p < pieces; ++p) {
      if (sum[at(query, p, h)] > 0.f) top = std::max(top, max[at(query, p, h)]);
    }
    std::fill_n(o, head_dim, 0.f);
    if (top == -INFINITY) return;
    float total = 0.f;
    for (int64_t p = 0; p < pieces; ++p) {
      const size_t i = at(query, p, h);
      if (sum[i] == 0.f) continue;
      const float scale = std::exp(max[i] - top);
      total += sum[i] * scale;
      const float* piece = out.data() + i * static_cast<size_t>(head_dim);
      for (int64_t d = 0; d < head_dim; ++d) o[d] += piece[d] * scale;
    }
    for (int64_t d = 0; d < head_dim; ++d) o[d] /= total;
  }
  size_t at(int64_t query, int64_t piece, int64_t h) const {
    return static_cast<size_t>((query * pieces + piece) * q_heads + h);
  }
};

template <typename KV>
void attend(const float* q, const KV* k, const KV* v, const int32_t* mask, const int32_t* slots,
            int64_t batch, int64_t seq, int64_t cache_len, int64_t q_heads, int64_t kv_heads,
            int64_t head_dim, float scale, int64_t window, float* out) {
  // The CPU's kernels for this cache dtype, looked up once rather than for every key.
  const VectorKernels& kernels = vector_kernels();
  const auto key_scores = [&] {
    if constexpr (std::is_same_v<KV, float>)
      return kernels.key_scores_f32;
    else
      return kernels.key_scores_bf16;
  }();
  const auto weighted_values = [&] {
    if constexpr (std::is_same_v<KV, float>)
      return kernels.weighted_values_f32;
    else
      return kernels.weighted_values_bf16;
  }();
  const int64_t row = kv_heads * head_dim, queries = batch * seq, q_row = q_heads * head_dim;
  const int64_t most_visible =
      std::min<int64_t>(cache_len, *std::max_element(slots, slots + seq) + 1);
  const auto [parts, pieces] = split_work(queries, kv_heads, most_visible);
  const int64_t group = q_heads / kv_heads;
  Pieces split(pieces > 1 ? queries : 0, pieces, q_heads, head_dim);
  const int64_t work = queries * q_heads * most_visible * head_dim;
#pragma omp parallel if (work > kParallelMinElements)
  {
    std::vector<int32_t> keys(static_cast<size_t>(most_visible));
    // A piece's scores, each query head's in a row: a piece has at most this many keys.
    Scratch scores(static_cast<size_t>(q_heads * (most_visible / pieces + 1)));
    std::vector<Exponentiated> weights(static_cast<size_t>(q_heads));
    // Items in (query, part, piece) order, so that a thread's items lie next to each other.
#pragma omp for schedule(static)
    for (int64_t item = 0; item < queries * parts * pieces; ++item) {
      const int64_t query = item / (parts * pieces), part = item / pieces % parts,
                    piece = item % pieces;
      const int64_t b = query / seq, s = query % seq;
      // The keys this query sees, then this piece's share of them.
      const int64_t visible_end = std::min<int64_t>(slots[s] + 1, cache_len);
      const int32_t* row_mask = mask + b * cache_len;
      int64_t visible = 0;
      for (int64_t j = first_visible_key(slots[s], window); j < visible_end; ++j) {
        if (row_mask[j] != 0) keys[static_cast<size_t>(visible++)] = static_cast<int32_t>(j);
      }
      const int64_t first = visible * piece / pieces,
                    count = visible * (piece + 1) / pieces - first;
      // This part's KV heads [kvh0, kvh0 + kv) and their query heads from h0.
      const int64_t kvh0 = kv_heads * part / parts, kv = kv_heads * (part + 1) / parts - kvh0;
      const int64_t h0 = kvh0 * group, heads = kv * group;
      float* o = (pieces == 1 ? out + query * q_row
                              : split.out.data() + split.at(query, piece, 0) * head_dim) +
                 h0 * head_dim;
      if (count == 0) {
        std::fill_n(o, heads * head_dim, 0.f);
        if (pieces > 1) std::fill_n(split.sum.data() + split.at(query, piece, h0), heads, 0.f);
        continue;
      }
      const int32_t* listed = keys.data() + first;
      const int64_t kv_at = b * cache_len * row + kvh0 * head_dim;
      key_scores(q + query * q_row + h0 * head_dim, heads, kv, k + kv_at, row, listed, count,
                 head_dim, scale, scores.data());
      for (int64_t h = 0; h < heads; ++h)
        weights[static_cast<size_t>(h)] = exponentiate_scores(scores.data() + h * count, count);
      weighted_values(scores.data(), heads, kv, v + kv_at, row, listed, count, head_dim, o);
      for (int64_t h = 0; h < heads; ++h) {
        const Exponentiated& e = weights[static_cast<size_t>(h)];
        if (pieces > 1) {
          split.max[split.at(query, piece, h0 + h)] = e.max;
          split.sum[split.at(query, piece, h0 + h)] = e.sum;
          continue;
        }
        const float inv = e.sum > 0.f ? 1.f / e.sum : 0.f;
        for (int64_t d = 0; d < head_dim; ++d) o[h * head_dim + d] *= inv;
      }
    }
    if (pieces > 1) {
#pragma omp for collapse(2) schedule(static)
      for (int64_t query = 0; query < queries; ++query) {
        for (int64_t h = 0; h < q_heads; ++h)
          split.merge(query, h, out + query * q_row + h * head_dim);
      }
    }
  }
}

// From this many queries on, scores and outputs run as matrix products (attention_gemm.h).
constexpr int64_t kGemmMinQueries = 16;

void attend_gemm(const float* q, const float* k, const float* v, const int32_t* mask,
                 const int32_t* slots, int64_t batch, int64_t seq, int64_t len, int64_t q_heads,
                 int64_t kv_heads, int64_t head_dim, float scale, int64_t window, float* out) {
  const int64_t group = q_heads / kv_heads;
  const HeadView view{seq, len, head_dim, q_heads * head_dim, kv_heads * head_dim, scale, window};
  const std::vector<QueryBlock> blocks = query_blocks(slots, seq, len);
  bool ok = true;
#pragma omp parallel reduction(&& : ok)
  {
    std::vector<float> probs(static_cast<size_t>(seq * len));
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < q_heads; ++h) {
        const int64_t q_at = b * seq * view.q_stride + h * head_dim;
        const int64_t kv_at = b * len * view.kv_stride + (h / group) * head_dim;
        for (const QueryBlock& block : blocks) {
          ok = ok &&
               attention_probs(q + q_at, k + kv_at, mask + b * len, slots, view, block,
                               probs.data()) &&
               gemm('N', 'N', block.rows, head_dim, block.keys, 1.f, probs.data(), block.keys,
                    v + kv_at, view.kv_stride, 0.f, out + q_at + block.first * view.q_stride,
                    view.q_stride);
        }
      }
    }
  }
  if (!ok) throw Error("[attention] oneDNN sgemm failed");
}

void check_kv_dtype(DType dtype) {
  if (dtype != DType::f32 && dtype != DType::bf16) {
    throw Error("[attention] KV cache of dtype " + std::string(dtype_name(dtype)) +
                " is not supported on cpu (f32, bf16)");
  }
}

}  // namespace

void cache_write(void* cache, DType cache_dtype, const float* update, const int32_t* slots,
                 int64_t batch, int64_t cache_len, int64_t seq, int64_t row_elems) {
  check_kv_dtype(cache_dtype);
  const size_t elem = dtype_size(cache_dtype);
#pragma omp parallel for collapse(2) \
    schedule(static) if (batch * seq * row_elems > kParallelMinElements)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      void* dst = static_cast<char*>(cache) +
                  static_cast<size_t>((b * cache_len + slots[s]) * row_elems) * elem;
      convert_elements(update + (b * seq + s) * row_elems, DType::f32, dst, cache_dtype,
                       static_cast<size_t>(row_elems));
    }
  }
}

void attention(const float* q, const void* k, const void* v, DType kv_dtype, const int32_t* mask,
               const int32_t* slots, int64_t batch, int64_t seq, int64_t cache_len, int64_t q_heads,
               int64_t kv_heads, int64_t head_dim, float scale, float* out, int64_t window) {
  check_kv_dtype(kv_dtype);
  if (kv_dtype == DType::f32 && seq >= kGemmMinQueries) {
    attend_gemm(q, static_cast<const float*>(k), static_cast<const float*>(v), mask, slots, batch,
                seq, cache_len, q_heads, kv_heads, head_dim, scale, window, out);
  } else if (kv_dtype == DType::f32) {
    attend(q, static_cast<const float*>(k), static_cast<const float*>(v), mask, slots, batch, seq,
           cache_len, q_heads, kv_heads, head_dim, scale, window, out);
  } else if (seq >= kGemmMinQueries && packed_product() != nullptr) {
    attention_bf16_on_tiles(
        q, static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), mask, slots, batch,
        q_heads, kv_heads,
        {seq, cache_len, head_dim, q_heads * head_dim, kv_heads * head_dim, scale, window}, out);
  } else if (seq >= kGemmMinQueries) {
    // A bf16 cache's keys and values that the queries can see, widened once (exactly) for the
    // matrix products: per-key dot products of many queries cost several times more.
    const int64_t visible = std::min<int64_t>(*std::max_element(slots, slots + seq) + 1, cache_len);
    const int64_t row = kv_heads * head_dim;
    thread_local std::vector<float> widened_k, widened_v;
    widened_k.resize(static_cast<size_t>(batch * cache_len * row));
    widened_v.resize(widened_k.size());
    const auto* k16 = static_cast<const uint16_t*>(k);
    const auto* v16 = static_cast<const uint16_t*>(v);
    float* kf = widened_k.data();  // the OpenMP threads below must share the caller's buffers
    float* vf = widened_v.data();
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t j = 0; j < visible; ++j) {
        const int64_t at = (b * cache_len + j) * row;
        convert_elements(k16 + at, DType::bf16, kf + at, DType::f32, static_cast<size_t>(row));
        convert_elements(v16 + at, DType::bf16, vf + at, DType::f32, static_cast<size_t>(row));
      }
    }
    attend_gemm(q, kf, vf, mask, slots, batch, seq, cache_len, q_heads, kv_heads, head_dim, scale,
                window, out);
  } else {
    attend(q, static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), mask, slots, batch,
           seq, cache_len, q_heads, kv_heads, head_dim, scale, window, out);
  }
}

}  // namespace tfm::cpu
