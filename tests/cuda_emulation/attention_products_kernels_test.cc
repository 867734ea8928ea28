// The CUDA row kernels of attention as products (head-major copies, the masked softmax and its
// gradient), their own source run on the CPU through the emulation in shim/ (no GPU needed). The
// cuBLASLt products between them cannot be emulated: here they are plain loops in double over the
// same bf16 operands, so the kernels run in the order attention_product_steps.cc runs them. The
// copies are checked exactly; the softmax and its gradient against closed forms; the forward
// output against the scalar reference in src/ops, and [dq | dk | dv] against the cpu backend's
// attention_grad (checked against finite differences in tests/graph), within bf16's precision.
// Grouped KV heads, a left-padded row whose first queries see no key, score rows padded past the
// keys (their padding never read or written), sizes that leave partial blocks, and sliding
// windows (Mistral's) that hide the first keys from later queries.
#include "backends/cuda/attention_products_kernels.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>

#include "backends/cpu/kernels.h"
#include "cuda_emulation/emulated_values.h"
#include "ops/reference.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;
using testing::to_bf16;
using testing::widened;

constexpr float kBf16Tol = 1e-2f;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

dim3 grid_of(int64_t blocks) { return {static_cast<unsigned>(blocks), 1, 1}; }

// to_head_major's launch: x [batch, seq, heads, d] -> bf16 [batch, heads, seq, d].
template <typename T>
std::vector<__nv_bfloat16> to_head_major(const std::vector<T>& x, int64_t seq, int64_t heads,
                                         int64_t d) {
  const auto total = static_cast<int64_t>(x.size());
  std::vector<__nv_bfloat16> out(x.size(), __float2bfloat16_rn(-7.f));
  cuda_emulation::launch(grid_of(blocks_for(total, kThreads)), kThreads, 0,
                         [&] { to_head_major_kernel(x.data(), seq, heads, d, total, out.data()); });
  return out;
}

// from_head_major's launch: f32 [batch, heads, seq, d] -> [batch, seq, heads, d] in Out.
template <typename Out = float>
std::vector<Out> from_head_major(const std::vector<float>& x, int64_t seq, int64_t heads,
                                 int64_t d) {
  const auto total = static_cast<int64_t>(x.size());
  std::vector<Out> out(x.size(), narrow<Out>(-7.f));
  cuda_emulation::launch(grid_of(blocks_for(total, kThreads)), kThreads, 0, [&] {
    from_head_major_kernel(x.data(), seq, heads, d, total, out.data());
  });
  return out;
}

TEST(AttentionProductsKernels, HeadMajorCopies) {
  constexpr int64_t batch = 2, seq = 5, heads = 3, d = 20;  // 600 elements: 3 blocks, one partial
  const std::vector<float> x = random_values(static_cast<size_t>(batch * seq * heads * d), 61);
  const std::vector<__nv_bfloat16> x16 = to_bf16(x);
  std::vector<float> want(x.size()), want_back(x.size());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t e = 0; e < d; ++e) {
          const int64_t token_major = ((b * seq + s) * heads + h) * d + e,
                        head_major = ((b * heads + h) * seq + s) * d + e;
          want[head_major] = __bfloat162float(x16[token_major]);
          want_back[token_major] = x[head_major];
        }
      }
    }
  }
  expect_close(widened(to_head_major(x, seq, heads, d)), want, 0.f, "from f32");
  expect_close(widened(to_head_major(x16, seq, heads, d)), want, 0.f, "from bf16");
  expect_close(from_head_major(x, seq, heads, d), want_back, 0.f, "back");
  // Back in bf16 (autocast's attention output): each value rounded once.
  expect_close(widened(from_head_major<__nv_bfloat16>(x, seq, heads, d)),
               widened(to_bf16(want_back)), 0.f, "back in bf16");
}

struct Case {
  int64_t batch, seq, len, q_heads, kv_heads, head_dim, first_slot, padding;
  int64_t window = 0;  // sliding window (0: none)
};

std::string describe(const Case& c) {
  return "b" + std::to_string(c.batch) + "_seq" + std::to_string(c.seq) + "_len" +
         std::to_string(c.len) + "_h" + std::to_string(c.q_heads) + "x" +
         std::to_string(c.kv_heads) + "_d" + std::to_string(c.head_dim) + "_pad" +
         std::to_string(c.padding) + (c.window > 0 ? "_window" + std::to_string(c.window) : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << describe(c); }

class AttentionProductsKernelsTest : public ::testing::TestWithParam<Case> {};

// Forward and backward as attention_product_steps.cc runs them over one chunk of all batch rows.
TEST_P(AttentionProductsKernelsTest, ForwardAndBackward) {
  const Case& c = GetParam();
  const int64_t B = c.batch, S = c.seq, L = c.len, Hq = c.q_heads, Hkv = c.kv_heads, D = c.head_dim,
                group = Hq / Hkv;
  const int64_t ld = (L + 7) / 8 * 8, rows = B * Hq * S;  // score rows, as the step pads them
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  const std::vector<__nv_bfloat16> q =
      to_bf16(random_values(static_cast<size_t>(B * S * Hq * D), 62));
  const std::vector<__nv_bfloat16> k =
      to_bf16(random_values(static_cast<size_t>(B * L * Hkv * D), 63, -2.f, 2.f));
  const std::vector<__nv_bfloat16> v = to_bf16(random_values(k.size(), 64));
  const std::vector<float> dy = random_values(q.size(), 65);
  std::vector<int32_t> slots(static_cast<size_t>(S)), mask(static_cast<size_t>(B * L), 1);
  for (int64_t i = 0; i < S; ++i) slots[i] = static_cast<int32_t>(c.first_slot + i);
  for (int64_t j = 0; j < c.padding; ++j) mask[(B - 1) * L + j] = 0;  // the last row left-padded

  const std::vector<float> q16 = widened(to_head_major(q, S, Hq, D)),
                           k16 = widened(to_head_major(k, L, Hkv, D)),
                           v16 = widened(to_head_major(v, L, Hkv, D)),
                           dy16 = widened(to_head_major(dy, S, Hq, D));
  // Row r = (b, h, i) of head-major q (and of the scores); row (b, kvh, j) of k and v.
  const auto q_row = [&](const std::vector<float>& x, int64_t r) { return &x[r * D]; };
  const auto kv_row = [&](const std::vector<float>& x, int64_t r, int64_t j) {
    const int64_t b = r / (Hq * S), h = r / S % Hq;
    return &x[((b * Hkv + h / group) * L + j) * D];
  };
  const auto dot = [D](const float* a, const float* b) {
    double sum = 0;
    for (int64_t e = 0; e < D; ++e) sum += static_cast<double>(a[e]) * b[e];
    return sum;
  };

  const auto sees = [&](int64_t i, int64_t b, int64_t j) {
    return j <= slots[i] && (c.window == 0 || slots[i] - j < c.window) && mask[b * L + j] != 0;
  };
  // scores = q k^T (the product), and the closed-form softmax and its gradient.
  std::vector<float> scores(static_cast<size_t>(rows * ld), kNaN), d_probs(scores.size(), kNaN);
  std::vector<float> want_p(scores.size(), 0.f), want_ds(scores.size(), 0.f);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / (Hq * S), i = r % S;
    double max_score = -INFINITY, sum = 0, delta = 0;
    std::vector<double> p(static_cast<size_t>(L), 0.0), dp(p.size());
    for (int64_t j = 0; j < L; ++j) {
      const double score = dot(q_row(q16, r), kv_row(k16, r, j));
      scores[r * ld + j] = static_cast<float>(score);
      dp[j] = dot(q_row(dy16, r), kv_row(v16, r, j));
      d_probs[r * ld + j] = static_cast<float>(dp[j]);
      if (sees(i, b, j)) {
        max_score = std::max(max_score, scale * static_cast<double>(scores[r * ld + j]));
      }
    }
    for (int64_t j = 0; j < L; ++j) {
      if (sees(i, b, j)) {
        sum += p[j] = std::exp(scale * static_cast<double>(scores[r * ld + j]) - max_score);
      }
    }
    for (int64_t j = 0; j < L && sum > 0; ++j) delta += (p[j] /= sum) * d_probs[r * ld + j];
    for (int64_t j = 0; j < L; ++j) {
      want_p[r * ld + j] = static_cast<float>(p[j]);
      want_ds[r * ld + j] = static_cast<float>(scale * p[j] * (d_probs[r * ld + j] - delta));
    }
  }

  std::vector<__nv_bfloat16> probs(scores.size(), __float2bfloat16_rn(kNaN));
  cuda_emulation::launch(grid_of(rows), kThreads, 0, [&] {
    masked_softmax_kernel(scores.data(), probs.data(), mask.data(), slots.data(), Hq, S, L, ld,
                          scale, c.window);
  });
  const std::vector<float> p16 = widened(probs);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < ld; ++j) {
      const size_t at = static_cast<size_t>(r * ld + j);
      if (j >= L) {  // the rows' padding: neither read nor written
        ASSERT_TRUE(std::isnan(scores[at]) && std::isnan(p16[at])) << "row " << r << " key " << j;
        continue;
      }
      ASSERT_NEAR(scores[at], want_p[at], 1e-5f * (1.f + want_p[at]))
          << "row " << r << " key " << j;
      ASSERT_NEAR(p16[at], want_p[at], kBf16Tol * want_p[at] + 1e-6f)
          << "row " << r << " key " << j;
    }
  }

  // out = probs v (the product), back to [B, S, Hq, D].
  std::vector<float> out_head_major(q.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t e = 0; e < D; ++e) {
      double sum = 0;
      for (int64_t j = 0; j < L; ++j)
        sum += p16[r * ld + j] * static_cast<double>(kv_row(v16, r, j)[e]);
      out_head_major[r * D + e] = static_cast<float>(sum);
    }
  }
  const std::vector<float> qf = widened(q), kf = widened(k), vf = widened(v);
  std::vector<float> want_out(q.size());
  ops::reference::attention(qf.data(), kf.data(), vf.data(), mask.data(), slots.data(), B, S, L, Hq,
                            Hkv, D, scale, want_out.data(), c.window);
  expect_close(from_head_major(out_head_major, S, Hq, D), want_out, kBf16Tol, "out");

  // The scores' gradient, written over the bf16 probabilities as the step does.
  cuda_emulation::launch(grid_of(rows), kThreads, 0, [&] {
    softmax_grad_kernel(scores.data(), d_probs.data(), L, ld, scale, probs.data());
  });
  const std::vector<float> ds16 = widened(probs);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < ld; ++j) {
      const size_t at = static_cast<size_t>(r * ld + j);
      if (j >= L) {
        ASSERT_TRUE(std::isnan(ds16[at])) << "row " << r << " key " << j;
        continue;
      }
      ASSERT_NEAR(ds16[at], want_ds[at], kBf16Tol * std::fabs(want_ds[at]) + 1e-6f)
          << "row " << r << " key " << j;
    }
  }

  // dq = d_scores k, dk = d_scores^T q, dv = probs^T dy (the products), back to token-major.
  std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(k.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / (Hq * S), h = r / S % Hq;
    for (int64_t j = 0; j < L; ++j) {
      const double ds = ds16[r * ld + j], p = p16[r * ld + j];
      const int64_t kv_at = ((b * Hkv + h / group) * L + j) * D;
      for (int64_t e = 0; e < D; ++e) {
        dq[r * D + e] += ds * k16[kv_at + e];
        dk[kv_at + e] += ds * q16[r * D + e];
        dv[kv_at + e] += p * dy16[r * D + e];
      }
    }
  }
  const auto as_f32 = [](const std::vector<double>& x) {
    return std::vector<float>(x.begin(), x.end());
  };
  std::vector<float> grads = from_head_major(as_f32(dq), S, Hq, D);
  for (const std::vector<double>* x : {&dk, &dv}) {
    const std::vector<float> token_major = from_head_major(as_f32(*x), L, Hkv, D);
    grads.insert(grads.end(), token_major.begin(), token_major.end());
  }
  std::vector<float> want_grads(q.size() + 2 * k.size());
  cpu::attention_grad(qf.data(), kf.data(), vf.data(), mask.data(), slots.data(), dy.data(), B, S,
                      L, Hq, Hkv, D, scale, want_grads.data(), c.window);
  expect_close(grads, want_grads, kBf16Tol, "[dq | dk | dv]");
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionProductsKernelsTest,
                         ::testing::Values(Case{2, 5, 5, 2, 1, 24, 0, 3},
                                           Case{1, 6, 11, 3, 1, 40, 5, 0},
                                           Case{2, 3, 300, 2, 1, 16, 297, 290},
                                           Case{2, 6, 11, 2, 1, 24, 5, 2, 4},
                                           Case{1, 4, 40, 2, 2, 16, 36, 0, 7}),
                         [](const auto& info) { return describe(info.param); });

}  // namespace
}  // namespace tfm::cuda
