// Attention over a static KV cache. Each (batch, query, head) is independent; the keys a query
// sees are the valid cache slots up to its own, so one kernel serves prefill chunks and decode.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/attention_gemm.h"
#include "backends/cpu/attention_tiles.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/packed_products.h"
#include "backends/cpu/vector_kernels.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

// A query's scores turned in place into unnormalized weights, exp(score - max); returns 1 / their
// sum, or 0 (all weights 0) where every score is -inf. std::exp, as before: with exp_shifted's
// polynomial instead, a training run split over processes left the one process's losses by more
// than 1e-5 (distributed tests).
float exponentiate_scores(float* p, int64_t count) {
  const float max_score = *std::max_element(p, p + count);
  if (max_score == -INFINITY) {
    std::fill_n(p, count, 0.f);
    return 0.f;
  }
  float denom = 0.f;
  for (int64_t i = 0; i < count; ++i) {
    p[i] = std::exp(p[i] - max_score);
    denom += p[i];
  }
  return 1.f / denom;
}

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
  // The query heads that share a KV head are adjacent: they go together, each key read once.
  // Threads split the KV heads too: decode has one (batch, query) pair, which alone left the other
  // threads waiting while one read every head's keys.
  const int64_t group = q_heads / kv_heads;
  const int64_t row = kv_heads * head_dim;
  const int64_t work = batch * seq * q_heads * slots[seq - 1] * head_dim;
#pragma omp parallel if (work > kParallelMinElements)
  {
    std::vector<int32_t> keys(static_cast<size_t>(cache_len));
    std::vector<float> scores(static_cast<size_t>(group * cache_len));
    std::vector<float> inv(static_cast<size_t>(group));  // each query row's 1 / sum of weights
#pragma omp for collapse(3) schedule(static)
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t s = 0; s < seq; ++s) {
        for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
          // The keys this query sees.
          const int64_t visible_end = std::min<int64_t>(slots[s] + 1, cache_len);
          const int32_t* row_mask = mask + b * cache_len;
          int64_t count = 0;
          for (int64_t j = first_visible_key(slots[s], window); j < visible_end; ++j) {
            if (row_mask[j] != 0) keys[static_cast<size_t>(count++)] = static_cast<int32_t>(j);
          }
          const int64_t first_row = (b * seq + s) * q_heads + kvh * group;
          float* o = out + first_row * head_dim;
          if (count == 0) {
            std::fill_n(o, group * head_dim, 0.f);
            continue;
          }
          const int64_t kv_at = b * cache_len * row + kvh * head_dim;
          key_scores(q + first_row * head_dim, group, k + kv_at, row, keys.data(), count, head_dim,
                     scale, scores.data());
          for (int64_t g = 0; g < group; ++g) {
            inv[static_cast<size_t>(g)] = exponentiate_scores(scores.data() + g * count, count);
          }
          weighted_values(scores.data(), group, v + kv_at, row, keys.data(), count, head_dim, o);
          for (int64_t g = 0; g < group; ++g) {
            for (int64_t d = 0; d < head_dim; ++d)
              o[g * head_dim + d] *= inv[static_cast<size_t>(g)];
          }
        }
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
