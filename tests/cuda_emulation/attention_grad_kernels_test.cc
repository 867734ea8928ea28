// The CUDA f32 attention backward kernels (row statistics, dq per query row, dk and dv per key
// row), their own source run on the CPU through the emulation in shim/ (no GPU needed), against
// the closed form in double: with P the softmax of the scaled scores over the visible keys and
// dP = dy v^T, dS = P * (dP - rowsum(P * dP)), dq = scale dS k, dk = scale dS^T q, dv = P^T dy
// (dk and dv summed over a KV head's group). Each head_dim register width the launcher picks;
// grouped KV heads; a left-padded row whose first queries see no key; a masked key amid visible
// ones; keys no query sees; sliding windows.
#include "backends/cuda/attention_grad_kernels.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>

#include "cuda_emulation/emulated_values.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;

struct Case {
  int64_t batch, seq, cache_len, q_heads, kv_heads, head_dim, first_slot, padding;
  int64_t window = 0;  // sliding window (0: none)
};

std::string describe(const Case& c) {
  return "b" + std::to_string(c.batch) + "_seq" + std::to_string(c.seq) + "_len" +
         std::to_string(c.cache_len) + "_h" + std::to_string(c.q_heads) + "x" +
         std::to_string(c.kv_heads) + "_d" + std::to_string(c.head_dim) + "_pad" +
         std::to_string(c.padding) + (c.window > 0 ? "_window" + std::to_string(c.window) : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << describe(c); }

// [dq | dk | dv] by the closed form, in double.
std::vector<float> closed_form(const Case& c, const std::vector<float>& q,
                               const std::vector<float>& k, const std::vector<float>& v,
                               const std::vector<float>& dy, const std::vector<int32_t>& mask,
                               const std::vector<int32_t>& slots, double scale) {
  const int64_t D = c.head_dim, L = c.cache_len, group = c.q_heads / c.kv_heads;
  const size_t q_size = q.size(), kv_size = k.size();
  std::vector<double> grads(q_size + 2 * kv_size, 0.0);
  double* dq = grads.data();
  double* dk = dq + q_size;
  double* dv = dk + kv_size;
  const auto dot = [D](const float* a, const float* b) {
    double sum = 0;
    for (int64_t e = 0; e < D; ++e) sum += static_cast<double>(a[e]) * b[e];
    return sum;
  };
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t i = 0; i < c.seq; ++i) {
      for (int64_t h = 0; h < c.q_heads; ++h) {
        const int64_t q_at = ((b * c.seq + i) * c.q_heads + h) * D;
        const auto kv_at = [&](int64_t j) { return ((b * L + j) * c.kv_heads + h / group) * D; };
        std::vector<int64_t> keys;
        for (int64_t j = 0; j < L; ++j) {
          const bool in_window = c.window == 0 || slots[i] - j < c.window;
          if (j <= slots[i] && in_window && mask[b * L + j] != 0) keys.push_back(j);
        }
        if (keys.empty()) continue;
        std::vector<double> p(keys.size()), dp(keys.size());
        double max_score = -INFINITY, sum = 0, delta = 0;
        for (size_t t = 0; t < keys.size(); ++t) {
          p[t] = scale * dot(&q[q_at], &k[kv_at(keys[t])]);
          max_score = std::max(max_score, p[t]);
          dp[t] = dot(&dy[q_at], &v[kv_at(keys[t])]);
        }
        for (double& x : p) sum += x = std::exp(x - max_score);
        for (size_t t = 0; t < keys.size(); ++t) delta += (p[t] /= sum) * dp[t];
        for (size_t t = 0; t < keys.size(); ++t) {
          const double ds = p[t] * (dp[t] - delta);
          const int64_t at = kv_at(keys[t]);
          for (int64_t e = 0; e < D; ++e) {
            dq[q_at + e] += scale * ds * k[at + e];
            dk[at + e] += scale * ds * q[q_at + e];
            dv[at + e] += p[t] * dy[q_at + e];
          }
        }
      }
    }
  }
  return std::vector<float>(grads.begin(), grads.end());
}

// The launcher's three launches, one block of kWarps warps per output row.
template <int E>
void run(const Operands& o, const AttentionShape& s, float scale, float* out) {
  const int64_t q_rows = s.batch * s.seq * s.q_heads, kv_rows = s.batch * s.cache_len * s.kv_heads;
  float* dq = out;
  float* dk = dq + q_rows * s.head_dim;
  float* dv = dk + kv_rows * s.head_dim;
  std::vector<RowStats> stats(static_cast<size_t>(q_rows), RowStats{-7.f, -7.f, -7.f});
  const dim3 q_grid{static_cast<unsigned>(q_rows), 1, 1},
      kv_grid{static_cast<unsigned>(kv_rows), 1, 1};
  cuda_emulation::launch(q_grid, kWarps * 32, 0,
                         [&] { row_stats_kernel<E>(o, s, scale, stats.data()); });
  cuda_emulation::launch(q_grid, kWarps * 32, 0,
                         [&] { query_grad_kernel<E>(o, s, scale, stats.data(), dq); });
  cuda_emulation::launch(kv_grid, kWarps * 32, 0,
                         [&] { key_grad_kernel<E>(o, s, scale, stats.data(), dk, dv); });
}

class AttentionGradKernelsTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionGradKernelsTest, MatchesClosedForm) {
  const Case& c = GetParam();
  const AttentionShape s{c.batch, c.seq, c.cache_len, c.q_heads, c.kv_heads, c.head_dim, c.window};
  const float scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t L = c.cache_len;
  const std::vector<float> q =
      random_values(static_cast<size_t>(c.batch * c.seq * c.q_heads * c.head_dim), 51);
  const std::vector<float> k =
      random_values(static_cast<size_t>(c.batch * L * c.kv_heads * c.head_dim), 52, -2.f, 2.f);
  const std::vector<float> v = random_values(k.size(), 53);
  const std::vector<float> dy = random_values(q.size(), 54);
  std::vector<int32_t> slots(static_cast<size_t>(c.seq)), mask(static_cast<size_t>(c.batch * L), 1);
  for (int64_t i = 0; i < c.seq; ++i) slots[i] = static_cast<int32_t>(c.first_slot + i);
  // The last row is left-padded; the first has a masked key among visible ones.
  for (int64_t j = 0; j < c.padding; ++j) mask[(c.batch - 1) * L + j] = 0;
  if (c.batch > 1) mask[c.first_slot + c.seq / 2] = 0;

  const std::vector<float> want = closed_form(c, q, k, v, dy, mask, slots, scale);
  std::vector<float> out(want.size(), -7.f);
  const Operands o{q.data(), k.data(), v.data(), dy.data(), mask.data(), slots.data()};
  // attention_grad's choice of E, the head_dim elements each lane holds.
  switch ((c.head_dim + 31) / 32) {
    case 1:
      run<1>(o, s, scale, out.data());
      break;
    case 2:
      run<2>(o, s, scale, out.data());
      break;
    case 3:
    case 4:
      run<4>(o, s, scale, out.data());
      break;
    default:
      run<8>(o, s, scale, out.data());
      break;
  }
  const auto part = [&](size_t from, size_t to) {
    return std::vector<float>(out.begin() + static_cast<int64_t>(from),
                              out.begin() + static_cast<int64_t>(to));
  };
  const auto wanted = [&](size_t from, size_t to) {
    return std::vector<float>(want.begin() + static_cast<int64_t>(from),
                              want.begin() + static_cast<int64_t>(to));
  };
  const size_t nq = q.size(), nk = k.size();
  expect_close(part(0, nq), wanted(0, nq), 1e-5f, "dq");
  expect_close(part(nq, nq + nk), wanted(nq, nq + nk), 1e-5f, "dk");
  expect_close(part(nq + nk, nq + 2 * nk), wanted(nq + nk, nq + 2 * nk), 1e-5f, "dv");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionGradKernelsTest,
    ::testing::Values(Case{2, 5, 5, 4, 2, 24, 0, 3}, Case{2, 4, 9, 3, 1, 40, 4, 6},
                      Case{2, 3, 9, 2, 2, 72, 4, 5}, Case{1, 3, 4, 2, 1, 200, 1, 0},
                      Case{2, 6, 12, 4, 2, 24, 5, 2, 3}, Case{1, 8, 8, 2, 1, 40, 0, 0, 4}),
    [](const auto& info) { return describe(info.param); });

}  // namespace
}  // namespace tfm::cuda
