// The merge of attention's chunks (chunk_merge.cuh: split-K decode and flash prefill over key
// splits), its own source run on the CPU through the emulation in shim/, one warp, against the
// closed form: out = sum_c exp(m_c - M) o_c / sum_c l_c exp(m_c - M) over the chunks that saw a
// key (l_c != 0), M the largest of their maxima, computed in double.
#include "backends/cuda/chunk_merge.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cuda_emulation/emulated_values.h"

namespace tfm::cuda {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Chunks {
  int64_t splits;
  int head_dim;
  std::vector<float> partials;  // [splits][head_dim + 2], as partial_at lays them out
};

// Seeded chunks; those listed in `empty` saw no key: sum 0, max -inf, and NaN where the output
// would be, which must not reach the merged row.
Chunks make_chunks(int64_t splits, int head_dim, const std::vector<int64_t>& empty, uint64_t seed) {
  Chunks c{splits, head_dim,
           testing::random_values(static_cast<size_t>(splits * (head_dim + 2)), seed, -3.f, 3.f)};
  for (int64_t s = 0; s < splits; ++s) {
    float* chunk = c.partials.data() + s * (head_dim + 2);
    chunk[1] = std::abs(chunk[1]) + 0.5f;  // a sum of exponentials is positive
  }
  for (const int64_t s : empty) {
    float* chunk = c.partials.data() + s * (head_dim + 2);
    chunk[0] = -std::numeric_limits<float>::infinity(), chunk[1] = 0.f;
    for (int d = 0; d < head_dim; ++d) chunk[2 + d] = kNaN;
  }
  return c;
}

std::vector<float> closed_form(const Chunks& c) {
  const auto chunk = [&](int64_t s) { return c.partials.data() + s * (c.head_dim + 2); };
  double top = -INFINITY;
  for (int64_t s = 0; s < c.splits; ++s) {
    if (chunk(s)[1] != 0.f) top = std::max(top, static_cast<double>(chunk(s)[0]));
  }
  std::vector<double> sum(static_cast<size_t>(c.head_dim), 0.0);
  double denom = 0.0;
  for (int64_t s = 0; s < c.splits; ++s) {
    if (chunk(s)[1] == 0.f) continue;
    const double weight = std::exp(chunk(s)[0] - top);
    denom += chunk(s)[1] * weight;
    for (int d = 0; d < c.head_dim; ++d) sum[d] += chunk(s)[2 + d] * weight;
  }
  std::vector<float> out(sum.size(), 0.f);
  if (denom == 0.0) return out;  // no key seen: zeros, as on the CPU
  for (size_t d = 0; d < out.size(); ++d) out[d] = static_cast<float>(sum[d] / denom);
  return out;
}

template <int E, typename Out>
std::vector<float> merged(const Chunks& c) {
  std::vector<Out> out(static_cast<size_t>(c.head_dim), narrow<Out>(-7.f));
  cuda_emulation::launch(dim3{1, 1, 1}, 32, 0, [&] {
    merge_chunks<E>(c.partials.data(), c.splits, c.head_dim, out.data(),
                    static_cast<int>(threadIdx.x % 32));
  });
  return testing::widened(out);
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t d = 0; d < got.size(); ++d) {
    EXPECT_NEAR(got[d], want[d], tol * (1.f + std::abs(want[d]))) << what << ", element " << d;
  }
}

TEST(ChunkMerge, MatchesClosedForm) {
  // More chunks than lanes and than one group loaded at once, not a whole number of groups, with
  // empty chunks first (the running max starts at -inf), between and last.
  const Chunks many = make_chunks(37, 128, {0, 5, 6, 36}, 71);
  expect_near_all(merged<4, float>(many), closed_form(many), 1e-5f, "37 chunks, head_dim 128");
  // head_dim 24: lanes 24-31 hold nothing.
  const Chunks narrow = make_chunks(5, 24, {2}, 72);
  expect_near_all(merged<1, float>(narrow), closed_form(narrow), 1e-5f, "5 chunks, head_dim 24");
  const Chunks one = make_chunks(1, 64, {}, 73);
  expect_near_all(merged<2, float>(one), closed_form(one), 1e-5f, "one chunk");
  const Chunks wide = make_chunks(9, 256, {3}, 74);
  expect_near_all(merged<8, float>(wide), closed_form(wide), 1e-5f, "9 chunks, head_dim 256");
  // Written as bf16 (the flash kernel's output): the closed form rounded once.
  const Chunks to_bf16 = make_chunks(11, 128, {4}, 75);
  expect_near_all(merged<4, __nv_bfloat16>(to_bf16), closed_form(to_bf16), 8e-3f, "bf16 output");
}

TEST(ChunkMerge, QueryThatSeesNoKeyGetsZeros) {
  const Chunks none = make_chunks(6, 32, {0, 1, 2, 3, 4, 5}, 76);
  for (const float v : merged<1, float>(none)) EXPECT_EQ(v, 0.f);
}

// A NaN score leaves its chunk a NaN sum: kept, so the row is NaN as on the CPU, not the merge
// of the other chunks.
TEST(ChunkMerge, NaNSumReachesTheOutput) {
  Chunks c = make_chunks(10, 64, {1}, 77);
  c.partials[7 * (64 + 2) + 1] = kNaN;
  for (const float v : merged<2, float>(c)) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace tfm::cuda
