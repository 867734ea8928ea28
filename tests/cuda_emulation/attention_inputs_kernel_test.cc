// The CUDA prepare_attention kernel, its own source run on the CPU through the emulation in
// shim/ (no GPU needed), against the scalar references in src/ops: q normed per head and
// rotated, k normed and rotated into its cache slot, v copied into its slot; f32 and bf16 caches
// (bf16 keeps 8 bits of mantissa), with and without q/k norms.
#include "backends/cuda/attention_inputs_kernel.cuh"

#include <gtest/gtest.h>

#include <cmath>

#include "cuda_emulation/emulated_values.h"
#include "ops/reference.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;

template <typename T>
void check(int64_t batch, int64_t seq, int64_t q_heads, int64_t kv_heads, int64_t d,
           int64_t cache_len, bool norms) {
  const int64_t rows = batch * seq;
  const float eps = 1e-6f, scaling = 1.25f;
  const std::vector<float> q = random_values(static_cast<size_t>(rows * q_heads * d), 31);
  const std::vector<float> k = random_values(static_cast<size_t>(rows * kv_heads * d), 32);
  const std::vector<float> v = random_values(k.size(), 33);
  const std::vector<float> q_norm = random_values(static_cast<size_t>(d), 34, 0.5f, 1.5f);
  const std::vector<float> k_norm = random_values(static_cast<size_t>(d), 35, 0.5f, 1.5f);
  std::vector<float> inv_freq(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) inv_freq[i] = std::pow(10000.f, -2.f * i / d);
  std::vector<int32_t> positions(static_cast<size_t>(rows)), slots(static_cast<size_t>(seq));
  for (int64_t i = 0; i < rows; ++i)
    positions[i] = static_cast<int32_t>(3 + i % seq + 7 * (i / seq));
  for (int64_t i = 0; i < seq; ++i) slots[i] = static_cast<int32_t>(cache_len - seq + i);

  const int64_t cache_size = batch * cache_len * kv_heads * d;
  std::vector<T> k_cache(static_cast<size_t>(cache_size)), v_cache(k_cache.size());
  std::vector<float> q_out(q.size(), -7.f);
  const AttentionInputs in{q.data(),
                           k.data(),
                           v.data(),
                           positions.data(),
                           slots.data(),
                           inv_freq.data(),
                           norms ? q_norm.data() : nullptr,
                           norms ? k_norm.data() : nullptr};
  const Params p{in, eps, scaling, {batch, seq, cache_len, q_heads, kv_heads, d}, q_out.data()};
  const int64_t warps = rows * (q_heads + 2 * kv_heads);
  cuda_emulation::launch({static_cast<unsigned>(blocks_for(warps * 32, kThreads)), 1, 1}, kThreads,
                         0,
                         [&] { prepare_attention_kernel<T>(p, k_cache.data(), v_cache.data()); });

  const auto prepared = [&](const std::vector<float>& x, const std::vector<float>& norm,
                            int64_t heads) {
    std::vector<float> normed = x, out(x.size());
    if (norms) ops::reference::rms_norm(x.data(), norm.data(), rows * heads, d, eps, normed.data());
    ops::reference::rope(normed.data(), positions.data(), inv_freq.data(), batch, seq, heads, d,
                         scaling, out.data());
    return out;
  };
  std::vector<float> want_k(static_cast<size_t>(cache_size), 0.f), want_v(want_k.size(), 0.f);
  const std::vector<float> k_rotated = prepared(k, k_norm, kv_heads);
  ops::reference::cache_write(want_k.data(), k_rotated.data(), slots.data(), batch, cache_len, seq,
                              kv_heads * d);
  ops::reference::cache_write(want_v.data(), v.data(), slots.data(), batch, cache_len, seq,
                              kv_heads * d);
  const float cache_tol = std::is_same_v<T, float> ? 2e-5f : 8e-3f;
  expect_close(q_out, prepared(q, q_norm, q_heads), 2e-5f, "q");
  expect_close(testing::widened(k_cache), want_k, cache_tol, "k cache");
  expect_close(testing::widened(v_cache), want_v, cache_tol, "v cache");
}

TEST(AttentionInputsKernel, MatchesReference) {
  check<float>(2, 3, 4, 2, 16, 8, true);
  check<__nv_bfloat16>(2, 3, 4, 2, 128, 8, true);
  check<float>(1, 1, 16, 8, 128, 40, false);
  check<__nv_bfloat16>(3, 2, 2, 1, 64, 5, false);
}

}  // namespace
}  // namespace tfm::cuda
