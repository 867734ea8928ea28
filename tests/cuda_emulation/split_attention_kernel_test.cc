// The CUDA split-K attention kernel over a static cache (decode, and prefill over an f32 cache),
// its own source run on the CPU through the emulation in shim/, against the scalar reference in
// src/ops. A row's chunks run as separate blocks and the last to arrive merges them; the
// counters it arrives on must be left zero, so each case launches twice. Masked slots, and those
// before every query's sliding window, hold non-finite values, which must not reach the output.
#include "backends/cuda/split_attention_kernel.cuh"

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
  int64_t batch, seq, cache_len, q_heads, kv_heads, head_dim, first_slot, padding;
  bool bf16_cache;
  int64_t window = 0;  // sliding window (0: none)
};

std::string describe(const Case& c) {
  return "b" + std::to_string(c.batch) + "_seq" + std::to_string(c.seq) + "_len" +
         std::to_string(c.cache_len) + "_d" + std::to_string(c.head_dim) + "_pad" +
         std::to_string(c.padding) + (c.bf16_cache ? "_bf16" : "_f32") +
         (c.window > 0 ? "_window" + std::to_string(c.window) : "");
}

template <typename KV, int E>
void check(const Case& c) {
  const AttentionShape s{c.batch, c.seq, c.cache_len, c.q_heads, c.kv_heads, c.head_dim, c.window};
  const float scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t row = c.kv_heads * c.head_dim;
  const std::vector<float> q =
      random_values(static_cast<size_t>(c.batch * c.seq * c.q_heads * c.head_dim), 4);
  std::vector<float> k =
      random_values(static_cast<size_t>(c.batch * c.cache_len * row), 5, -2.f, 2.f);
  std::vector<float> v = random_values(k.size(), 6);
  if constexpr (!std::is_same_v<KV, float>) {
    k = widened(testing::to_bf16(k)), v = widened(testing::to_bf16(v));
  }
  std::vector<int32_t> slots(static_cast<size_t>(c.seq)),
      mask(static_cast<size_t>(c.batch * c.cache_len), 0);
  for (int64_t i = 0; i < c.seq; ++i) slots[i] = static_cast<int32_t>(c.first_slot + i);
  // The last row is left-padded: its first `padding` slots are masked.
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t j = b == c.batch - 1 ? c.padding : 0; j < c.first_slot + c.seq; ++j) {
      mask[b * c.cache_len + j] = 1;
    }
  }
  std::vector<float> want(q.size());
  ops::reference::attention(q.data(), k.data(), v.data(), mask.data(), slots.data(), c.batch, c.seq,
                            c.cache_len, c.q_heads, c.kv_heads, c.head_dim, scale, want.data(),
                            c.window);
  // Keys before every query's window are as good as masked.
  const int64_t seen_from = c.window > 0 ? c.first_slot - c.window + 1 : 0;
  for (size_t j = 0; j < mask.size(); ++j) {
    if (mask[j] != 0 && static_cast<int64_t>(j) % c.cache_len >= seen_from) continue;
    for (int64_t e = 0; e < row; ++e) {
      k[j * row + e] = std::numeric_limits<float>::infinity();
      v[j * row + e] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  std::vector<KV> k_stored, v_stored;
  if constexpr (std::is_same_v<KV, float>) {
    k_stored = k, v_stored = v;
  } else {
    k_stored = testing::to_bf16(k), v_stored = testing::to_bf16(v);
  }

  const Split split = split_of(s);
  const int64_t rows = c.batch * c.seq * c.q_heads;
  std::vector<float> partials(static_cast<size_t>(rows * split.count * (c.head_dim + 2)));
  std::vector<unsigned> arrivals(static_cast<size_t>(rows), 0);
  for (int launch = 0; launch < 2; ++launch) {
    std::vector<float> out(q.size(), -7.f);
    const dim3 grid{static_cast<unsigned>(rows), static_cast<unsigned>(split.count), 1};
    cuda_emulation::launch(grid, kWarps * 32, 0, [&] {
      attention_partial_kernel<KV, E>(q.data(), k_stored.data(), v_stored.data(), mask.data(),
                                      slots.data(), s, scale, partials.data(), arrivals.data(),
                                      out.data(), FreshToken{});
    });
    expect_close(out, want, 2e-5f, "launch " + std::to_string(launch));
    for (size_t r = 0; r < arrivals.size(); ++r) ASSERT_EQ(arrivals[r], 0u) << "row " << r;
  }
}

class SplitAttentionKernelTest : public ::testing::TestWithParam<Case> {};

template <typename KV>
void check_head_dim(const Case& c) {
  switch ((c.head_dim + 31) / 32) {
    case 1:
      return check<KV, 1>(c);
    case 2:
      return check<KV, 2>(c);
    case 3:
    case 4:
      return check<KV, 4>(c);
    default:
      FAIL() << "head_dim " << c.head_dim << " not covered here";
  }
}

TEST_P(SplitAttentionKernelTest, MatchesReference) {
  const Case& c = GetParam();
  if (c.bf16_cache) return check_head_dim<__nv_bfloat16>(c);
  check_head_dim<float>(c);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SplitAttentionKernelTest,
                         ::testing::Values(Case{2, 1, 40, 4, 2, 16, 30, 4, false},
                                           Case{1, 1, 600, 4, 2, 128, 500, 0, true},
                                           Case{2, 1, 1100, 2, 1, 128, 900, 500, false},
                                           Case{2, 12, 20, 4, 2, 48, 0, 4, false},
                                           Case{2, 1, 300, 2, 1, 24, 200, 250, true},
                                           // A short context in a long cache (3 of 64 chunks
                                           // used), and a long one in 126 chunks of 12 keys.
                                           Case{1, 1, 1024, 16, 8, 128, 20, 0, true},
                                           Case{1, 1, 2048, 1, 1, 32, 1500, 3, false},
                                           // 3 splits of 21 keys: 5 or 6 a warp, in batches.
                                           Case{1, 1, 63, 2, 1, 64, 62, 5, true},
                                           // Sliding windows: a decode step's last 100 of 901
                                           // keys, over chunks that start at the window; a
                                           // prefill's; and one whose padding hides part of it.
                                           Case{1, 1, 1100, 2, 1, 128, 900, 0, false, 100},
                                           Case{2, 12, 20, 4, 2, 48, 0, 4, false, 5},
                                           Case{2, 1, 300, 2, 1, 24, 200, 170, true, 64}),
                         [](const auto& info) { return describe(info.param); });

// Decode with prepare_attention fused in: the kernel gets the token's q, k and v as the products
// left them, norms and rotates q and k itself, uses them for the token's own slot (which holds
// NaN before the launch) and stores k and v there. Against the scalar references: rms_norm and
// rope, the cache write rounded to the cache's dtype, then attention over that cache. With
// keys_before_wait the first keys are read before the (emulated, empty) wait: the same results.
template <typename KV, int E>
void check_fused(int64_t head_dim, bool norms, bool keys_before_wait) {
  const int64_t batch = 2, cache_len = 300, q_heads = 4, kv_heads = 2, d = head_dim, slot = 200;
  const AttentionShape s{batch, 1, cache_len, q_heads, kv_heads, d};
  const float scale = 1.f / std::sqrt(static_cast<float>(d)), eps = 1e-6f, scaling = 1.25f;
  const int64_t row = kv_heads * d;
  const std::vector<float> q = random_values(static_cast<size_t>(batch * q_heads * d), 41);
  const std::vector<float> k = random_values(static_cast<size_t>(batch * row), 42);
  const std::vector<float> v = random_values(k.size(), 43);
  const std::vector<float> q_norm = random_values(static_cast<size_t>(d), 44, 0.5f, 1.5f);
  const std::vector<float> k_norm = random_values(static_cast<size_t>(d), 45, 0.5f, 1.5f);
  std::vector<float> inv_freq(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) inv_freq[i] = std::pow(10000.f, -2.f * i / d);
  const std::vector<int32_t> positions = {slot, slot - 3}, slots = {static_cast<int32_t>(slot)};
  std::vector<int32_t> mask(static_cast<size_t>(batch * cache_len), 0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = b; j <= slot; ++j) mask[b * cache_len + j] = 1;  // row 1 left-padded by one
  }
  // The earlier slots as stored; the token's own slot NaN until the kernel writes it.
  std::vector<float> k_cache =
      random_values(static_cast<size_t>(batch * cache_len * row), 46, -2.f, 2.f);
  std::vector<float> v_cache = random_values(k_cache.size(), 47);
  if constexpr (!std::is_same_v<KV, float>) {
    k_cache = widened(testing::to_bf16(k_cache)), v_cache = widened(testing::to_bf16(v_cache));
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t e = 0; e < row; ++e) {
      k_cache[(b * cache_len + slot) * row + e] = std::numeric_limits<float>::quiet_NaN();
      v_cache[(b * cache_len + slot) * row + e] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  std::vector<KV> k_stored, v_stored;
  if constexpr (std::is_same_v<KV, float>) {
    k_stored = k_cache, v_stored = v_cache;
  } else {
    k_stored = testing::to_bf16(k_cache), v_stored = testing::to_bf16(v_cache);
  }

  const auto prepared = [&](const std::vector<float>& x, const std::vector<float>& norm,
                            int64_t heads) {
    std::vector<float> normed = x, out(x.size());
    if (norms)
      ops::reference::rms_norm(x.data(), norm.data(), batch * heads, d, eps, normed.data());
    ops::reference::rope(normed.data(), positions.data(), inv_freq.data(), batch, 1, heads, d,
                         scaling, out.data());
    return out;
  };
  const auto stored = [](std::vector<float> x) {
    if constexpr (!std::is_same_v<KV, float>) x = widened(testing::to_bf16(x));
    return x;
  };
  std::vector<float> want_k = k_cache, want_v = v_cache;
  ops::reference::cache_write(want_k.data(), stored(prepared(k, k_norm, kv_heads)).data(),
                              slots.data(), batch, cache_len, 1, row);
  ops::reference::cache_write(want_v.data(), stored(v).data(), slots.data(), batch, cache_len, 1,
                              row);
  std::vector<float> want(q.size());
  ops::reference::attention(prepared(q, q_norm, q_heads).data(), want_k.data(), want_v.data(),
                            mask.data(), slots.data(), batch, 1, cache_len, q_heads, kv_heads, d,
                            scale, want.data());

  const FreshToken fresh{
      {q.data(), k.data(), v.data(), positions.data(), slots.data(), inv_freq.data(),
       norms ? q_norm.data() : nullptr, norms ? k_norm.data() : nullptr},
      eps,
      scaling,
      keys_before_wait};
  const Split split = split_of(s);
  const int64_t rows = batch * q_heads;
  std::vector<float> partials(static_cast<size_t>(rows * split.count * (d + 2)));
  std::vector<unsigned> arrivals(static_cast<size_t>(rows), 0);
  std::vector<float> out(q.size(), -7.f);
  const dim3 grid{static_cast<unsigned>(rows), static_cast<unsigned>(split.count), 1};
  cuda_emulation::launch(grid, kWarps * 32, 0, [&] {
    attention_partial_kernel<KV, E>(nullptr, k_stored.data(), v_stored.data(), mask.data(),
                                    slots.data(), s, scale, partials.data(), arrivals.data(),
                                    out.data(), fresh);
  });
  expect_close(out, want, 2e-5f, "attention");
  const float cache_tol = std::is_same_v<KV, float> ? 2e-5f : 8e-3f;
  expect_close(widened(k_stored), want_k, cache_tol, "k cache");
  expect_close(widened(v_stored), want_v, cache_tol, "v cache");
}

TEST(SplitAttentionKernel, FusedPrepareMatchesPrepareThenAttention) {
  check_fused<__nv_bfloat16, 4>(128, true, false);
  check_fused<__nv_bfloat16, 4>(128, true, true);
  check_fused<float, 1>(32, false, true);
  check_fused<__nv_bfloat16, 1>(16, true, false);
}

}  // namespace
}  // namespace tfm::cuda
