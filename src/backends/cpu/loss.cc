// Causal-LM cross-entropy over logits rows; the label shift happens on the host, so row r's
// target is the token that follows position r (or kIgnoreIndex).
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

void check_targets(const int32_t* targets, int64_t rows, int64_t vocab) {
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] != graph::kIgnoreIndex && (targets[r] < 0 || targets[r] >= vocab)) {
      throw Error("[cross_entropy] target " + std::to_string(targets[r]) + " at row " +
                  std::to_string(r) + " is outside the vocabulary (" + std::to_string(vocab) +
                  " tokens) and is not the ignore index " + std::to_string(graph::kIgnoreIndex));
    }
  }
}

// log(sum(exp(row))) computed around the row's maximum.
float log_sum_exp(const float* row, int64_t vocab) {
  float max_logit = -INFINITY;
  for (int64_t v = 0; v < vocab; ++v) max_logit = std::max(max_logit, row[v]);
  thread_local std::vector<float> e;
  e.resize(static_cast<size_t>(vocab));
  simd::map(row, e.data(), vocab,
            [max_logit](simd::Vec x) { return simd::exp(x - simd::broadcast(max_logit)); });
  double sum = 0;
  for (float v : e) sum += v;
  return static_cast<float>(std::log(sum)) + max_logit;
}

}  // namespace

void cross_entropy(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                   float* loss_sum) {
  check_targets(targets, rows, vocab);
  std::vector<double> row_loss(static_cast<size_t>(rows), 0.0);
#pragma omp parallel for schedule(static) if (rows * vocab > kParallelMinElements)
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == graph::kIgnoreIndex) continue;
    const float* row = logits + r * vocab;
    row_loss[static_cast<size_t>(r)] = double{log_sum_exp(row, vocab)} - row[targets[r]];
  }
  double total = 0;  // in row order, so the sum does not depend on the thread count
  for (double l : row_loss) total += l;
  *loss_sum = static_cast<float>(total);
}

void cross_entropy_grad(const float* logits, const int32_t* targets, const float* d_loss,
                        int64_t rows, int64_t vocab, float* d_logits) {
  check_targets(targets, rows, vocab);
  const float scale = *d_loss;
#pragma omp parallel for schedule(static) if (rows * vocab > kParallelMinElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * vocab;
    float* out = d_logits + r * vocab;
    if (targets[r] == graph::kIgnoreIndex) {
      std::fill(out, out + vocab, 0.f);
      continue;
    }
    const float lse = log_sum_exp(row, vocab);
    simd::map(row, out, vocab, [lse, scale](simd::Vec x) {
      return simd::exp(x - simd::broadcast(lse)) * simd::broadcast(scale);
    });
    out[targets[r]] -= scale;
  }
}

}  // namespace tfm::cpu
