// Attention over a static KV cache (decode and prefill), on each backend (CUDA skipped, and said
// so, where absent), compiled and eager, against the scalar reference in src/ops reading the
// cache as stored. Covers grouped KV heads, a left-padded row whose first queries see no key,
// queries placed mid-cache after earlier tokens, and huge values in masked slots, which must
// not reach the output, sliding windows, and decode of one sequence, whose KV heads and keys the
// threads split.
// On CUDA, prefill over a bf16 cache runs the flash-style tensor-core kernel, which reads q and the
// probabilities as bf16, and so does the CPU where it has AMX tiles (from 16 queries on): their
// tolerance is bf16's.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/packed_products.h"
#include "fusion/plan.h"
#include "graph/backend.h"
#include "graph/builder.h"
#include "ops/reference.h"
#include "support/random_values.h"
#include "tfm/device.h"

namespace tfm {
namespace {

using graph::ValueId;
using testing::expect_close;
using testing::random_values;
using testing::rounded;

struct Case {
  std::string device;
  int64_t batch, seq, cache_len, q_heads, kv_heads, head_dim;
  int64_t first_slot;  // the queries' first slot; the slots before it hold earlier tokens
  DType cache;
  int64_t window = 0;  // sliding window (0: none)
};

std::string describe(const Case& c) {
  return c.device + "_b" + std::to_string(c.batch) + "_seq" + std::to_string(c.seq) + "_len" +
         std::to_string(c.cache_len) + "_h" + std::to_string(c.q_heads) + "x" +
         std::to_string(c.kv_heads) + "_d" + std::to_string(c.head_dim) + "_at" +
         std::to_string(c.first_slot) + "_" + std::string(dtype_name(c.cache)) +
         (c.window > 0 ? "_window" + std::to_string(c.window) : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << describe(c); }

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return describe(info.param); }

class CacheAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(CacheAttentionTest, MatchesReference) {
  const Case& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present: skipped";
  const Device device = c.device == "cuda" ? Device{"cuda", 0} : kCpu;
  const int64_t b = c.batch, s = c.seq, len = c.cache_len, d = c.head_dim;
  const Shape q_shape{b, s, c.q_heads, d}, cache_shape{b, len, c.kv_heads, d};
  const float scale = 1.f / std::sqrt(static_cast<float>(d));

  std::vector<int32_t> slots(static_cast<size_t>(s)), mask(static_cast<size_t>(b * len), 0);
  for (int64_t i = 0; i < s; ++i) slots[i] = static_cast<int32_t>(c.first_slot + i);
  // The last row is left-padded by 3 + seq / 2 tokens: its first queries see no key.
  const int64_t padding = b > 1 ? 3 + s / 2 : 0;
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t j = r == b - 1 ? padding : 0; j < c.first_slot + s; ++j) mask[r * len + j] = 1;
  }
  const std::vector<float> q = random_values(static_cast<size_t>(shape_numel(q_shape)), 1);
  std::vector<float> k = random_values(static_cast<size_t>(shape_numel(cache_shape)), 2, -2.f, 2.f);
  std::vector<float> v = random_values(k.size(), 3);
  // Huge values in every masked slot: skipped by the reference, so any weight a kernel gave
  // them would show.
  const int64_t row = c.kv_heads * d;
  for (size_t j = 0; j < mask.size(); ++j) {
    if (mask[j] != 0) continue;
    for (int64_t e = 0; e < row; ++e) k[j * row + e] = 3e4f, v[j * row + e] = -5e3f;
  }

  graph::Builder g;
  const ValueId qv = g.input("q", q_shape, DType::f32);
  const ValueId mask_v = g.input("mask", {b, len}, DType::i32);
  const ValueId slots_v = g.input("slots", {s}, DType::i32);
  const ValueId k_cache = g.state("k_cache", cache_shape, c.cache);
  const ValueId v_cache = g.state("v_cache", cache_shape, c.cache);
  g.output(g.attention(qv, k_cache, v_cache, mask_v, slots_v, scale, c.window));
  const graph::Graph graph = g.finish();

  const std::vector<float> k_stored = rounded(k, c.cache), v_stored = rounded(v, c.cache);
  std::vector<float> want(q.size());
  ops::reference::attention(q.data(), k_stored.data(), v_stored.data(), mask.data(), slots.data(),
                            b, s, len, c.q_heads, c.kv_heads, d, scale, want.data(), c.window);

  const bool bf16_reads =
      c.cache == DType::bf16 &&
      (c.device == "cuda" ? s > 1 : s >= 16 && cpu::packed_product() != nullptr);
  const float tol = bf16_reads ? 1e-2f : 2e-5f;
  graph::Backend& backend = graph::backend_for(device);
  const auto executable = backend.compile(graph);
  for (const bool eager : {false, true}) {
    const std::vector<Tensor> inputs{
        Tensor::from_vector<float>(q, q_shape), Tensor::from_vector<int32_t>(mask, {b, len}),
        Tensor::from_vector<int32_t>(slots, {s}),
        Tensor::from_vector<float>(k, cache_shape).to(c.cache).to(device),
        Tensor::from_vector<float>(v, cache_shape).to(c.cache).to(device)};
    const std::vector<Tensor> out =
        eager ? backend.run_eager(graph, inputs) : executable->run(inputs).outputs;
    ASSERT_EQ(out.size(), 1u);
    expect_close(out[0].to_f32_vector(), want, tol, eager ? "eager" : "compiled");
  }
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const std::string device : {"cpu", "cuda"}) {
    for (const DType cache : {DType::f32, DType::bf16}) {
      all.push_back({device, 2, 1, 40, 4, 2, 16, 30, cache});     // decode
      all.push_back({device, 2, 12, 20, 4, 2, 16, 0, cache});     // a short prompt
      all.push_back({device, 1, 70, 96, 2, 1, 32, 5, cache});     // two query tiles, MHA-like
      all.push_back({device, 2, 130, 200, 4, 1, 64, 40, cache});  // three tiles, group of 4
      all.push_back({device, 2, 65, 160, 2, 2, 128, 7, cache});
      all.push_back(
          {device, 1, 3, 300, 4, 2, 128, 250, cache});        // a few queries late in a long cache
      all.push_back({device, 2, 9, 24, 2, 1, 24, 2, cache});  // head_dim no kernel tiles
      // Decode of one sequence: fewer queries than threads, which split its KV heads and, where
      // those are too few (one here), its keys, merged after.
      all.push_back({device, 1, 1, 300, 6, 2, 80, 250, cache});
      all.push_back({device, 1, 1, 300, 3, 1, 80, 250, cache});
    }
  }
  // Sliding windows shorter than the keys: decode, a short prompt (per-key dot products) and
  // matrix products over query blocks (on CUDA: split keys, and products rather than flash).
  for (const std::string device : {"cpu", "cuda"}) {
    for (const DType cache : {DType::f32, DType::bf16}) {
      all.push_back({device, 2, 1, 40, 4, 2, 16, 30, cache, 7});
      // One sequence's decode whose window leaves one key: a thread's share of them is empty.
      all.push_back({device, 1, 1, 300, 4, 1, 16, 250, cache, 1});
      all.push_back({device, 2, 12, 20, 4, 2, 16, 0, cache, 5});
      all.push_back({device, 1, 70, 96, 2, 1, 32, 5, cache, 33});
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Devices, CacheAttentionTest, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tfm
