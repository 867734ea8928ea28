// The CUDA split-K attention kernel over a static cache (decode, and prefill over an f32 cache),
// its own source run on the CPU through the emulation in shim/, against the scalar reference in
// src/ops. A row's chunks run as separate blocks and the last to arrive merges them; the
// counters it arrives on must be left zero, so each case launches twice. Masked slots hold
// non-finite values, which must not reach the output.
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

struct Case {
  int64_t batch, seq, cache_len, q_heads, kv_heads, head_dim, first_slot, padding;
  bool bf16_cache;
};

std::string describe(const Case& c) {
  return "b" + std::to_string(c.batch) + "_seq" + std::to_string(c.seq) + "_len" +
         std::to_string(c.cache_len) + "_d" + std::to_string(c.head_dim) + "_pad" +
         std::to_string(c.padding) + (c.bf16_cache ? "_bf16" : "_f32");
}

template <typename KV, int E>
void check(const Case& c) {
  const AttentionShape s{c.batch, c.seq, c.cache_len, c.q_heads, c.kv_heads, c.head_dim};
  const float scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t row = c.kv_heads * c.head_dim;
  const std::vector<float> q =
      random_values(static_cast<size_t>(c.batch * c.seq * c.q_heads * c.head_dim), 4);
  std::vector<float> k =
      random_values(static_cast<size_t>(c.batch * c.cache_len * row), 5, -2.f, 2.f);
  std::vector<float> v = random_values(k.size(), 6);
  if constexpr (!std::is_same_v<KV, float>) {
    k = testing::widened(testing::to_bf16(k)), v = testing::widened(testing::to_bf16(v));
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
                            c.cache_len, c.q_heads, c.kv_heads, c.head_dim, scale, want.data());
  for (size_t j = 0; j < mask.size(); ++j) {
    if (mask[j] != 0) continue;
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
                                      out.data());
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
                                           // A short context in a long cache; more chunks than
                                           // lanes (the merge reads them 32 at a time).
                                           Case{1, 1, 1024, 16, 8, 128, 20, 0, true},
                                           Case{1, 1, 2048, 1, 1, 32, 1500, 3, false}),
                         [](const auto& info) { return describe(info.param); });

}  // namespace
}  // namespace tfm::cuda
