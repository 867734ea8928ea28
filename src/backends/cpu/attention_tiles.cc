#include "backends/cpu/attention_tiles.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/scratch.h"
#include "backends/cpu/vector_kernels.h"

namespace tfm::cpu {
namespace {

// Each (batch, KV head)'s values turned to [head_dim, visible] rows, the keys along a row: the
// weighted sum over keys is then a product with rows, as the tiles take their right operand.
// The buffer is the calling thread's, kept between calls: a fresh one each layer cost page faults.
const uint16_t* values_by_dimension(const uint16_t* v, int64_t batch, int64_t kv_heads,
                                    const HeadView& view, int64_t visible) {
  const int64_t d = view.head_dim;
  thread_local Bf16Scratch turned;
  turned.resize(static_cast<size_t>(batch * kv_heads * d * visible));
  uint16_t* to = turned.data();  // shared by the threads below
  // Keys per task: their rows, kv_stride apart, stay in L1 while turned.
  constexpr int64_t kKeys = 16;
  const int64_t spans = (visible + kKeys - 1) / kKeys;
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < kv_heads; ++h) {
      for (int64_t span = 0; span < spans; ++span) {
        const uint16_t* from = v + b * view.len * view.kv_stride + h * d;
        uint16_t* head = to + (b * kv_heads + h) * d * visible;
        const int64_t end = std::min(visible, (span + 1) * kKeys);
        for (int64_t e = 0; e < d; ++e) {
          for (int64_t j = span * kKeys; j < end; ++j)
            head[e * visible + j] = from[j * view.kv_stride + e];
        }
      }
    }
  }
  return to;
}

}  // namespace

void attention_bf16_on_tiles(const float* q, const uint16_t* k, const uint16_t* v,
                             const int32_t* mask, const int32_t* slots, int64_t batch,
                             int64_t q_heads, int64_t kv_heads, const HeadView& view, float* out) {
  const TileProducts* tiles = attention_products();
  const int64_t d = view.head_dim, group = q_heads / kv_heads;
  const std::vector<QueryBlock> blocks = query_blocks(slots, view.seq, view.len);
  int64_t visible = 0;
  for (const QueryBlock& block : blocks) visible = std::max(visible, block.keys);
  const uint16_t* values = values_by_dimension(v, batch, kv_heads, view, visible);
  const auto block_count = static_cast<int64_t>(blocks.size());
  const auto round = vector_kernels().round_bf16;
  const auto weights_of_scores = vector_kernels().attention_weights_bf16;
#pragma omp parallel
  {
    std::vector<uint16_t> queries(static_cast<size_t>(blocks[0].rows * d));
    std::vector<float> scores(static_cast<size_t>(blocks[0].rows * visible));
    std::vector<uint16_t> weights(scores.size());
    std::vector<float> inv(static_cast<size_t>(blocks[0].rows));
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < q_heads; ++h) {
        for (int64_t i = 0; i < block_count; ++i) {
          const QueryBlock& block = blocks[static_cast<size_t>(i)];
          const int64_t keys = block.keys;
          const int64_t q_at = (b * view.seq + block.first) * view.q_stride + h * d;
          const int64_t kv_head = h / group;
          for (int64_t r = 0; r < block.rows; ++r) {
            round(q + q_at + r * view.q_stride, queries.data() + r * d, d);
          }
          tiles->on_this_thread(queries.data(), d, k + b * view.len * view.kv_stride + kv_head * d,
                                view.kv_stride, block.rows, keys, d, scores.data(), keys);
          for (int64_t r = 0; r < block.rows; ++r) {
            const int64_t last = slots[block.first + r];
            inv[static_cast<size_t>(r)] = weights_of_scores(
                scores.data() + r * keys, mask + b * view.len, first_visible_key(last, view.window),
                std::min<int64_t>(last + 1, keys), keys, view.scale, weights.data() + r * keys);
          }
          float* o = out + q_at;
          tiles->on_this_thread(weights.data(), keys,
                                values + (b * kv_heads + kv_head) * d * visible, visible,
                                block.rows, d, keys, o, view.q_stride);
          for (int64_t r = 0; r < block.rows; ++r) {
            for (int64_t e = 0; e < d; ++e) o[r * view.q_stride + e] *= inv[static_cast<size_t>(r)];
          }
        }
      }
    }
  }
}

}  // namespace tfm::cpu
