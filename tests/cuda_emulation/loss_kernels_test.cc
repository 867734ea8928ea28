// The CUDA cross-entropy kernels, their own source run on the CPU through the emulation in shim/
// (no GPU needed), launched as loss.cu launches them: each row's loss and their sum against
// ops::reference::cross_entropy, and the gradient against its closed form (softmax - one-hot)
// times d_loss, written apart and in place, alone and in the launch that writes the loss too;
// rows longer than the block, targets at either end of
// the vocabulary, ignored targets (graph::kIgnoreIndex: no loss, zero gradient), targets
// outside the vocabulary (NaN), and logits that rise along the row or are infinite.
#include "backends/cuda/loss_kernels.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cuda_emulation/emulated_values.h"
#include "ops/reference.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;

constexpr int64_t kVocab = 1500;  // a row is longer than the block: each thread loops
constexpr int32_t kIgnore = graph::kIgnoreIndex;

dim3 one_block_per(int64_t rows) { return {static_cast<unsigned>(rows), 1, 1}; }

std::vector<float> logits_for(int64_t rows) {
  return random_values(static_cast<size_t>(rows * kVocab), 21, -8.f, 8.f);
}

// cross_entropy_rows_kernel's launches as loss.cu makes them, a block per row of f32 or bf16
// logits: the rows' losses alone (cross_entropy), the gradient alone into `out` (f32 or bf16)
// apart from the logits or over them (cross_entropy_grad), or both, the gradient over the logits
// (cross_entropy_and_grad).
template <typename L, typename Out>
void rows_kernel(const L* logits, const std::vector<int32_t>& targets, const float* d_loss,
                 double* per_row, Out* out) {
  cuda_emulation::launch(one_block_per(static_cast<int64_t>(targets.size())), kThreads, 0, [&] {
    cross_entropy_rows_kernel(logits, targets.data(), kIgnore, d_loss, kVocab, per_row, out);
  });
}

template <typename L>
std::vector<double> row_losses(const std::vector<L>& logits, const std::vector<int32_t>& targets) {
  std::vector<double> per_row(targets.size(), -7.0);
  rows_kernel(logits.data(), targets, nullptr, per_row.data(), static_cast<float*>(nullptr));
  return per_row;
}

template <typename L, typename Out>
void gradient(const L* logits, const std::vector<int32_t>& targets, float d_loss, Out* out) {
  rows_kernel(logits, targets, &d_loss, nullptr, out);
}

// Rows [0, rows) of per_row against ops::reference::cross_entropy of the f32 values the kernel
// read.
void expect_reference_losses(const std::vector<double>& per_row, const std::vector<float>& logits,
                             const std::vector<int32_t>& targets, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    const double want =
        ops::reference::cross_entropy(logits.data() + r * kVocab, targets.data() + r, 1, kVocab);
    EXPECT_NEAR(per_row[r], want, 1e-5 * (1 + std::fabs(want))) << "row " << r;
  }
}

bool in_range(int32_t target) { return target >= 0 && target < kVocab; }

TEST(LossKernels, RowLossesAndTheirSum) {
  const std::vector<int32_t> targets = {17, kIgnore, 0, kVocab - 1, 1234, kIgnore, 600};
  const int64_t rows = static_cast<int64_t>(targets.size());
  const std::vector<float> logits = logits_for(rows);
  std::vector<double> per_row = row_losses(logits, targets);
  expect_reference_losses(per_row, logits, targets, rows);
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == kIgnore) {
      EXPECT_EQ(per_row[r], 0.0) << "row " << r;
    }
  }
  float loss = -7.f;
  cuda_emulation::launch({1, 1, 1}, kThreads, 0, [&] { sum_kernel(per_row.data(), rows, &loss); });
  const double want = ops::reference::cross_entropy(logits.data(), targets.data(), rows, kVocab);
  expect_close({loss}, {static_cast<float>(want)}, 1e-5f, "loss sum");
}

TEST(LossKernels, TargetOutsideTheVocabularyIsNan) {
  const std::vector<int32_t> targets = {kVocab, -1, 3};
  const int64_t rows = static_cast<int64_t>(targets.size());
  const std::vector<float> logits = logits_for(rows);
  const std::vector<double> per_row = row_losses(logits, targets);
  EXPECT_TRUE(std::isnan(per_row[0]));
  EXPECT_TRUE(std::isnan(per_row[1]));
  const double want =
      ops::reference::cross_entropy(logits.data() + 2 * kVocab, &targets[2], 1, kVocab);
  EXPECT_NEAR(per_row[2], want, 1e-5 * (1 + want));
}

// The one-pass log-sum-exp: logits that only rise along the row (each thread's max grows at every
// step), a row whose first half is -inf (threads that see only -inf for a while), and a row with
// one +inf (NaN, as the two-pass form on the cpu gives).
TEST(LossKernels, RisingAndInfiniteLogits) {
  const std::vector<int32_t> targets = {kVocab - 1, kVocab / 2 + 3, 5};
  const int64_t rows = static_cast<int64_t>(targets.size());
  std::vector<float> logits = logits_for(rows);
  for (int64_t v = 0; v < kVocab; ++v) {
    logits[v] = -20.f + 40.f * static_cast<float>(v) / kVocab;
    if (v < kVocab / 2) logits[kVocab + v] = -INFINITY;
  }
  logits[2 * kVocab + 700] = INFINITY;
  const std::vector<double> per_row = row_losses(logits, targets);
  expect_reference_losses(per_row, logits, targets, 2);
  EXPECT_TRUE(std::isnan(per_row[2]));
}

TEST(LossKernels, SumOfManyRows) {
  for (const int64_t rows : {int64_t{1100}, int64_t{3}, int64_t{0}}) {
    const std::vector<float> values = random_values(static_cast<size_t>(rows), 22, 0.f, 10.f);
    const std::vector<double> per_row(values.begin(), values.end());
    double want = 0;
    for (const double v : per_row) want += v;
    float loss = -7.f;
    cuda_emulation::launch({1, 1, 1}, kThreads, 0,
                           [&] { sum_kernel(per_row.data(), rows, &loss); });
    expect_close({loss}, {static_cast<float>(want)}, 1e-5f, "sum of " + std::to_string(rows));
  }
}

// (softmax(row) - one_hot(target)) * d_loss in double; 0 for an ignored target.
std::vector<float> closed_form_grad(const std::vector<float>& logits,
                                    const std::vector<int32_t>& targets, float d_loss) {
  std::vector<float> want(logits.size(), 0.f);
  for (size_t r = 0; r < targets.size(); ++r) {
    if (!in_range(targets[r])) continue;
    const float* row = logits.data() + r * kVocab;
    double max = -INFINITY, sum = 0;
    for (int64_t v = 0; v < kVocab; ++v) max = std::max(max, double{row[v]});
    for (int64_t v = 0; v < kVocab; ++v) sum += std::exp(row[v] - max);
    for (int64_t v = 0; v < kVocab; ++v) {
      const double p = std::exp(row[v] - max) / sum;
      want[r * kVocab + v] = static_cast<float>((p - (v == targets[r] ? 1.0 : 0.0)) * d_loss);
    }
  }
  return want;
}

TEST(LossKernels, Gradient) {
  const std::vector<int32_t> targets = {17, kIgnore, 0, kVocab - 1, 1234, kIgnore, 600};
  const int64_t rows = static_cast<int64_t>(targets.size());
  const std::vector<float> logits = logits_for(rows);
  // The mean over the 5 counted rows: d_loss is what the kernel scales each row's softmax by.
  const float d_loss = 1.f / 5;
  const std::vector<float> want = closed_form_grad(logits, targets, d_loss);

  std::vector<float> d_logits(logits.size(), -7.f);
  gradient(logits.data(), targets, d_loss, d_logits.data());
  expect_close(d_logits, want, 1e-5f, "d logits");

  // Written over the logits, as when only the loss reads them.
  std::vector<float> in_place = logits;
  gradient(in_place.data(), targets, d_loss, in_place.data());
  expect_close(in_place, want, 1e-5f, "d logits in place");

  // In bf16, for the backward products (graph::fold_casts): each value rounded once, so within
  // half a unit in the last of bf16's 8 bits (plus the f32 error above).
  std::vector<__nv_bfloat16> narrow(logits.size(), __float2bfloat16_rn(-7.f));
  gradient(logits.data(), targets, d_loss, narrow.data());
  const std::vector<float> got = testing::widened(narrow);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], std::fabs(want[i]) / 256 + 1e-7f) << "bf16 d logits at " << i;
  }

  // Each row's gradient sums to 0 (the softmax sums to 1).
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t v = 0; v < kVocab; ++v) sum += d_logits[r * kVocab + v];
    EXPECT_NEAR(sum, 0.0, 1e-6) << "row " << r;
  }
}

// bf16 logits (autocast's output layer), widened as they are read: the loss and gradient of the
// values they hold, as the f32 kernels give for those values in f32.
TEST(LossKernels, Bf16LogitsLossAndGradient) {
  const std::vector<int32_t> targets = {17, kIgnore, 0, kVocab - 1, 1234};
  const int64_t rows = static_cast<int64_t>(targets.size());
  const std::vector<__nv_bfloat16> narrow = testing::to_bf16(logits_for(rows));
  const std::vector<float> held = testing::widened(narrow);
  expect_reference_losses(row_losses(narrow, targets), held, targets, rows);
  const float d_loss = 0.25f;
  const std::vector<float> want = closed_form_grad(held, targets, d_loss);
  std::vector<float> d_logits(held.size(), -7.f);
  gradient(narrow.data(), targets, d_loss, d_logits.data());
  expect_close(d_logits, want, 1e-5f, "d logits from bf16 logits");
}

TEST(LossKernels, GradientOfATargetOutsideTheVocabularyIsNan) {
  const std::vector<int32_t> targets = {-1, 5, kVocab};
  const int64_t rows = static_cast<int64_t>(targets.size());
  const std::vector<float> logits = logits_for(rows);
  const float d_loss = 0.75f;
  std::vector<float> d_logits(logits.size(), -7.f);
  gradient(logits.data(), targets, d_loss, d_logits.data());
  for (int64_t v = 0; v < kVocab; ++v) {
    ASSERT_TRUE(std::isnan(d_logits[v])) << v;
    ASSERT_TRUE(std::isnan(d_logits[2 * kVocab + v])) << v;
  }
  const std::vector<float> want = closed_form_grad(logits, targets, d_loss);
  const std::vector<float> middle(d_logits.begin() + kVocab, d_logits.begin() + 2 * kVocab);
  expect_close(middle, {want.begin() + kVocab, want.begin() + 2 * kVocab}, 1e-5f, "row 1");
}

// The loss and the gradient over the logits in one launch (graph::fold_losses_into_gradients):
// the same bits as the two launches apart, in f32 and bf16, with ignored and out-of-vocabulary
// targets among the rows.
TEST(LossKernels, LossAndGradientInOneLaunch) {
  const std::vector<int32_t> targets = {17, kIgnore, 0, kVocab - 1, 1234, kVocab, 600};
  const int64_t rows = static_cast<int64_t>(targets.size());
  const float d_loss = 1.f / 5;
  const auto check = [&](const auto& logits, const std::string& dtype) {
    using L = typename std::decay_t<decltype(logits)>::value_type;
    const std::vector<double> want_losses = row_losses(logits, targets);
    std::vector<L> want_grad(logits.size());
    gradient(logits.data(), targets, d_loss, want_grad.data());

    std::vector<L> both = logits;
    std::vector<double> per_row(targets.size(), -7.0);
    rows_kernel(both.data(), targets, &d_loss, per_row.data(), both.data());
    for (int64_t r = 0; r < rows; ++r) {
      if (std::isnan(want_losses[r])) {
        EXPECT_TRUE(std::isnan(per_row[r])) << dtype << " row " << r;
      } else {
        EXPECT_EQ(per_row[r], want_losses[r]) << dtype << " row " << r;
      }
    }
    const std::vector<float> got = testing::widened(both), expected = testing::widened(want_grad);
    for (size_t i = 0; i < got.size(); ++i) {
      // (The row whose target is outside the vocabulary is NaN in both.)
      if (!(std::isnan(got[i]) && std::isnan(expected[i]))) {
        ASSERT_EQ(got[i], expected[i]) << dtype << " d logits at " << i;
      }
    }
  };
  const std::vector<float> logits = logits_for(rows);
  // The separate launches are themselves checked against the references above; the gradient's
  // closed form once more here, for the rows with a target in the vocabulary.
  std::vector<float> both = logits;
  std::vector<double> per_row(targets.size());
  rows_kernel(both.data(), targets, &d_loss, per_row.data(), both.data());
  const std::vector<float> want = closed_form_grad(logits, targets, d_loss);
  const std::vector<float> row0(both.begin(), both.begin() + kVocab);
  expect_close(row0, {want.begin(), want.begin() + kVocab}, 1e-5f, "row 0");
  check(logits, "f32");
  check(testing::to_bf16(logits), "bf16");
}

}  // namespace
}  // namespace tfm::cuda
