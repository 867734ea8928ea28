#include "backends/cpu/attention_tiles.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/packed_products.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/vector_kernels.h"

namespace tfm::cpu {
namespace {

// Values a row of a product's left operand takes for a depth of k: whole tiles of 32, zero past k
// (packed_products.h), and 32 more, so that rows a power of two apart do not share L1's few sets.
int64_t left_row_values(int64_t k) { return (packed_depth_tiles(k) + 1) * kPackedDepth; }

int64_t whole_row_tiles(int64_t rows) {
  return (rows + kLeftTileRows - 1) / kLeftTileRows * kLeftTileRows;
}

// Each (batch, KV head)'s keys [visible, head_dim] and values packed once a call, for every query
// block: the keys as the right operand of q k^T, the values as that of the weights' sum of them.
// The buffer is the calling thread's, kept between calls: a fresh one each layer cost page faults.
struct PackedHeads {
  const uint16_t* keys;
  const uint16_t* values;
  int64_t key_values, value_values;

  const uint16_t* keys_of(int64_t head) const { return keys + head * key_values; }
  const uint16_t* values_of(int64_t head) const { return values + head * value_values; }
};

PackedHeads packed_heads(const uint16_t* k, const uint16_t* v, int64_t batch, int64_t kv_heads,
                         const HeadView& view, int64_t visible) {
  const int64_t d = view.head_dim;
  const int64_t key_values = packed_values(d, visible), value_values = packed_values(visible, d);
  thread_local Bf16Scratch packed;
  packed.resize(static_cast<size_t>(batch * kv_heads * (key_values + value_values)));
  uint16_t* keys = packed.data();  // shared by the threads below
  uint16_t* values = keys + batch * kv_heads * key_values;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < kv_heads; ++h) {
      const int64_t at = b * view.len * view.kv_stride + h * d, head = b * kv_heads + h;
      avx512::pack_rows(k + at, view.kv_stride, visible, d, keys + head * key_values);
      avx512::pack_columns(v + at, view.kv_stride, visible, d, values + head * value_values);
    }
  }
  return {keys, values, key_values, value_values};
}

}  // namespace

void attention_bf16_on_tiles(const float* q, const uint16_t* k, const uint16_t* v,
                             const int32_t* mask, const int32_t* slots, int64_t batch,
                             int64_t q_heads, int64_t kv_heads, const HeadView& view, float* out) {
  const PackedProduct product = packed_product();
  const int64_t d = view.head_dim, group = q_heads / kv_heads;
  const std::vector<QueryBlock> blocks = query_blocks(slots, view.seq, view.len);
  int64_t visible = 0;
  for (const QueryBlock& block : blocks) visible = std::max(visible, block.keys);
  const PackedHeads heads = packed_heads(k, v, batch, kv_heads, view, visible);
  const auto block_count = static_cast<int64_t>(blocks.size());
  const auto round = vector_kernels().round_bf16;
  const auto weights_of_scores = vector_kernels().attention_weights_bf16;
  const int64_t query_row = left_row_values(d), weight_row = left_row_values(visible);
  const int64_t rows = whole_row_tiles(blocks[0].rows);
#pragma omp parallel
  {
    // Zero past each row's values and in the rows past a block's: read, never written.
    Bf16Scratch queries(static_cast<size_t>(rows * query_row), 0);
    Bf16Scratch weights(static_cast<size_t>(rows * weight_row), 0);
    Scratch scores(static_cast<size_t>(blocks[0].rows * visible));
    std::vector<float> inv(static_cast<size_t>(blocks[0].rows));
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < q_heads; ++h) {
        for (int64_t i = 0; i < block_count; ++i) {
          const QueryBlock& block = blocks[static_cast<size_t>(i)];
          const int64_t keys = block.keys, kv_head = b * kv_heads + h / group;
          const int64_t q_at = (b * view.seq + block.first) * view.q_stride + h * d;
          for (int64_t r = 0; r < block.rows; ++r) {
            round(q + q_at + r * view.q_stride, queries.data() + r * query_row, d);
          }
          product(queries.data(), query_row, block.rows, heads.keys_of(kv_head),
                  packed_depth_tiles(d), keys, d, nullptr, scores.data(), keys);
          const int64_t keys_in_tiles = packed_depth_tiles(keys) * kPackedDepth;
          for (int64_t r = 0; r < block.rows; ++r) {
            const int64_t last = slots[block.first + r];
            uint16_t* row = weights.data() + r * weight_row;
            inv[static_cast<size_t>(r)] = weights_of_scores(
                scores.data() + r * keys, mask + b * view.len, first_visible_key(last, view.window),
                std::min<int64_t>(last + 1, keys), keys, view.scale, row);
            std::fill(row + keys, row + keys_in_tiles, uint16_t{0});  // an earlier block's
          }
          product(weights.data(), weight_row, block.rows, heads.values_of(kv_head),
                  packed_depth_tiles(visible), d, keys, inv.data(), out + q_at, view.q_stride);
        }
      }
    }
  }
}

}  // namespace tfm::cpu
