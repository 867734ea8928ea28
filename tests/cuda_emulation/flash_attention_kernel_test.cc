// The CUDA flash-style prefill attention kernel (bf16 cache), its own source run on the CPU
// through the emulation in shim/ (no GPU needed), against the scalar reference in src/ops. It
// reads q and the probabilities as bf16, so the tolerance is bf16's. Cases cover grouped KV
// heads, several query tiles, queries placed late in a long cache, a left-padded row whose first
// queries see no key, and non-finite values in masked slots, which must not reach the output.
#include "backends/cuda/flash_attention_kernel.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cuda_emulation/emulated_values.h"
#include "ops/reference.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;
using testing::widened;

struct Case {
  int64_t batch, seq, cache_len, q_heads, kv_heads, head_dim;
  int64_t first_slot;  // the queries' first slot; the slots before it hold earlier tokens
  float key_range = 2.f;  // keys uniform in [-key_range, key_range]: larger, peakier softmax
};

std::string describe(const Case& c) {
  return "b" + std::to_string(c.batch) + "_seq" + std::to_string(c.seq) + "_len" +
         std::to_string(c.cache_len) + "_h" + std::to_string(c.q_heads) + "x" +
         std::to_string(c.kv_heads) + "_d" + std::to_string(c.head_dim) + "_at" +
         std::to_string(c.first_slot) + "_keys" + std::to_string(static_cast<int>(c.key_range));
}

// The inputs of one case, and the reference output for the cache as stored (KV: float or bf16).
template <typename KV>
struct Inputs {
  AttentionShape shape;
  float scale;
  std::vector<float> q, want;
  std::vector<KV> k, v;
  std::vector<int32_t> mask, slots;
};

template <typename KV>
Inputs<KV> inputs_for(const Case& c) {
  Inputs<KV> in;
  in.shape = {c.batch, c.seq, c.cache_len, c.q_heads, c.kv_heads, c.head_dim};
  in.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t row = c.kv_heads * c.head_dim;
  in.q = random_values(static_cast<size_t>(c.batch * c.seq * c.q_heads * c.head_dim), 1);
  std::vector<float> k =
      random_values(static_cast<size_t>(c.batch * c.cache_len * row), 2, -c.key_range, c.key_range);
  std::vector<float> v = random_values(k.size(), 3);
  in.slots.resize(static_cast<size_t>(c.seq));
  for (int64_t i = 0; i < c.seq; ++i) in.slots[i] = static_cast<int32_t>(c.first_slot + i);
  // The last row is left-padded by 3 + seq / 2 tokens: its first queries see no key.
  in.mask.assign(static_cast<size_t>(c.batch * c.cache_len), 0);
  const int64_t padding = c.batch > 1 ? 3 + c.seq / 2 : 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t j = b == c.batch - 1 ? padding : 0; j < c.first_slot + c.seq; ++j) {
      in.mask[b * c.cache_len + j] = 1;
    }
  }
  std::vector<float> k_ref = k, v_ref = v;
  for (size_t j = 0; j < in.mask.size(); ++j) {
    if (in.mask[j] != 0) continue;
    for (int64_t e = 0; e < row; ++e) {
      k[j * row + e] = std::numeric_limits<float>::infinity();
      v[j * row + e] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  if constexpr (std::is_same_v<KV, float>) {
    in.k = k, in.v = v;
  } else {
    in.k = testing::to_bf16(k), in.v = testing::to_bf16(v);
    k_ref = widened(testing::to_bf16(k_ref)), v_ref = widened(testing::to_bf16(v_ref));
  }
  in.want.resize(in.q.size());
  ops::reference::attention(in.q.data(), k_ref.data(), v_ref.data(), in.mask.data(),
                            in.slots.data(), c.batch, c.seq, c.cache_len, c.q_heads, c.kv_heads,
                            c.head_dim, in.scale, in.want.data());
  return in;
}

// With `splits` key splits, each block leaves partial results in scratch and the tile's last
// block merges them; the counters they arrive on must be left zero.
template <int D, typename Out>
void run_flash(const Inputs<__nv_bfloat16>& in, int splits, std::vector<Out>& out) {
  const int64_t query_tiles = forward_query_tile_count(in.shape);
  const dim3 grid{static_cast<unsigned>(query_tiles * splits),
                  static_cast<unsigned>(in.shape.q_heads), static_cast<unsigned>(in.shape.batch)};
  std::vector<float> partials(
      static_cast<size_t>(in.shape.batch * in.shape.seq * in.shape.q_heads * splits * (D + 2)));
  std::vector<unsigned> arrivals(
      static_cast<size_t>(in.shape.batch * in.shape.q_heads * query_tiles), 0);
  const KeySplits key_splits{splits, partials.data(), arrivals.data()};
  cuda_emulation::launch(grid, kThreads, ForwardLayout<D>::total, [&] {
    flash_attention_kernel<D, float, false, Out>(in.q.data(), in.k.data(), in.v.data(),
                                                 in.mask.data(), in.slots.data(), in.shape,
                                                 in.scale, out.data(), {}, key_splits);
  });
  for (size_t i = 0; i < arrivals.size(); ++i) ASSERT_EQ(arrivals[i], 0u) << "tile " << i;
}

class FlashAttentionKernelTest : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttentionKernelTest, MatchesReference) {
  const Inputs<__nv_bfloat16> in = inputs_for<__nv_bfloat16>(GetParam());
  // One split, and three (of which some see no key tile when the context is short).
  for (const int splits : {1, 3}) {
    std::vector<float> out(in.q.size(), -7.f);
    const bool ran = dispatch_head_dim(
        in.shape.head_dim, [&](auto d) { run_flash<decltype(d)::value>(in, splits, out); });
    ASSERT_TRUE(ran) << "no flash kernel for head_dim " << in.shape.head_dim;
    expect_close(out, in.want, 1e-2f, std::to_string(splits) + " key splits");
    // In bf16 (autocast's, graph::fold_casts, whose steps split no keys): the f32 output, each
    // value rounded once.
    if (splits != 1) continue;
    std::vector<__nv_bfloat16> narrowed(in.q.size(), __float2bfloat16_rn(-7.f));
    dispatch_head_dim(in.shape.head_dim,
                      [&](auto d) { run_flash<decltype(d)::value>(in, splits, narrowed); });
    expect_close(widened(narrowed), widened(testing::to_bf16(out)), 0.f, "bf16");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashAttentionKernelTest,
    ::testing::Values(Case{2, 12, 20, 4, 2, 16, 0}, Case{1, 70, 96, 2, 1, 32, 5},
                      Case{2, 130, 200, 4, 1, 64, 40}, Case{2, 65, 160, 2, 2, 128, 7},
                      Case{1, 2, 300, 4, 2, 128, 250}, Case{2, 65, 160, 2, 2, 64, 7, 8.f},
                      // Two blocks' queries at head_dim 128 and 32, the second's last rows past
                      // seq.
                      Case{1, 200, 230, 2, 1, 128, 20}, Case{2, 140, 150, 2, 1, 32, 10}),
    [](const auto& info) { return describe(info.param); });

}  // namespace
}  // namespace tfm::cuda
