// Causal-LM cross-entropy over logits rows; the label shift happens on the host, so row r's
// target is the token that follows position r (or kIgnoreIndex).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/lane_sum.h"
#include "backends/cpu/vector_kernels.h"
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

// The row's maximum and the sum of exp(x - maximum).
struct SoftmaxStats {
  float max;
  double sum;
};

SoftmaxStats softmax_stats(const float* row, int64_t vocab) {
  float max_logit = -INFINITY;
  for (int64_t v = 0; v < vocab; ++v) max_logit = std::max(max_logit, row[v]);
  thread_local std::vector<float> e;
  e.resize(static_cast<size_t>(vocab));
  vector_kernels().exp_shifted(row, e.data(), vocab, max_logit, 1.f);
  const float* exps = e.data();
  return {max_logit, lane_sum(vocab, [exps](int64_t v) { return double{exps[v]}; })};
}

// This rank's column of `target`, or -1 where another rank holds it.
int64_t local_column(int32_t target, int64_t vocab, const VocabShard* shard) {
  const int64_t column = target - (shard ? shard->first_id : 0);
  return column >= 0 && column < vocab ? column : -1;
}

int64_t full_vocab(int64_t vocab, const VocabShard* shard) {
  return shard ? shard->vocab_size : vocab;
}

// The columns of a row of `vocab` that are ids of the vocabulary; the rest are padding.
int64_t real_columns(int64_t vocab, const VocabShard* shard) {
  return shard ? std::clamp<int64_t>(shard->vocab_size - shard->first_id, 0, vocab) : vocab;
}

// log(sum(exp(row))) of each row, over every rank's columns when the vocabulary is split: each
// rank's (max, sum) are gathered and rescaled to the largest max.
std::vector<float> log_sum_exp(const Logits& logits, int64_t rows, const VocabShard* shard) {
  std::vector<SoftmaxStats> stats(static_cast<size_t>(rows));
  const int64_t columns = real_columns(logits.vocab, shard);
#pragma omp parallel for schedule(static) if (rows * logits.vocab > kParallelMinElements)
  for (int64_t r = 0; r < rows; ++r) {
    thread_local std::vector<float> wide;
    stats[static_cast<size_t>(r)] = softmax_stats(logits.row(r, wide), columns);
  }
  std::vector<float> lse(static_cast<size_t>(rows));
  if (!shard) {
    for (size_t r = 0; r < lse.size(); ++r) {
      lse[r] = static_cast<float>(std::log(stats[r].sum)) + stats[r].max;
    }
    return lse;
  }
  const auto n = static_cast<size_t>(rows);
  std::vector<float> mine(2 * n);  // maxima, then sums
  for (size_t r = 0; r < n; ++r) {
    mine[r] = stats[r].max;
    mine[n + r] = static_cast<float>(stats[r].sum);
  }
  const int ranks = shard->group->size();
  std::vector<float> all(2 * n * static_cast<size_t>(ranks));
  shard->group->all_gather(mine.data(), mine.size(), all.data());
  for (size_t r = 0; r < n; ++r) {
    float max = -INFINITY;
    for (int k = 0; k < ranks; ++k) max = std::max(max, all[2 * n * k + r]);
    double sum = 0;
    for (int k = 0; k < ranks; ++k) {
      sum += double{all[2 * n * k + n + r]} * std::exp(double{all[2 * n * k + r]} - max);
    }
    lse[r] = static_cast<float>(std::log(sum)) + max;
  }
  return lse;
}

}  // namespace

const float* Logits::row(int64_t r, std::vector<float>& wide) const {
  const size_t offset = static_cast<size_t>(r * vocab) * dtype_size(dtype);
  if (dtype == DType::f32)
    return reinterpret_cast<const float*>(static_cast<const char*>(data) + offset);
  wide.resize(static_cast<size_t>(vocab));
  convert_elements(static_cast<const char*>(data) + offset, dtype, wide.data(), DType::f32,
                   static_cast<size_t>(vocab));
  return wide.data();
}

float Logits::at(int64_t r, int64_t column) const {
  float value;
  convert_elements(
      static_cast<const char*>(data) + static_cast<size_t>(r * vocab + column) * dtype_size(dtype),
      dtype, &value, DType::f32, 1);
  return value;
}

namespace {

// The sum of the rows' losses, each counted once: on the rank that holds its target.
double loss_total(const Logits& logits, const int32_t* targets, const std::vector<float>& lse,
                  int64_t rows, const VocabShard* shard) {
  double total = 0;  // in row order, so the sum does not depend on the thread count
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == graph::kIgnoreIndex) continue;
    const int64_t column = local_column(targets[r], real_columns(logits.vocab, shard), shard);
    if (column >= 0) total += double{lse[static_cast<size_t>(r)]} - logits.at(r, column);
  }
  return total;
}

void write_loss(double total, float* loss_sum, const VocabShard* shard) {
  *loss_sum = static_cast<float>(total);
  if (shard) shard->group->all_reduce_sum(loss_sum, 1);
}

void write_gradient(const Logits& logits, const int32_t* targets, float scale,
                    const std::vector<float>& lse, int64_t rows, void* d_logits, DType out_dtype,
                    const VocabShard* shard) {
  const int64_t vocab = logits.vocab, columns = real_columns(vocab, shard);
  const bool narrowed = out_dtype != DType::f32;
  const size_t out_row_bytes = static_cast<size_t>(vocab) * dtype_size(out_dtype);
#pragma omp parallel for schedule(static) if (rows * vocab > kParallelMinElements)
  for (int64_t r = 0; r < rows; ++r) {
    thread_local std::vector<float> wide_in;
    const float* row = logits.row(r, wide_in);
    void* dst = static_cast<char*>(d_logits) + static_cast<size_t>(r) * out_row_bytes;
    // A narrowed row is computed in f32 beside it, one row per thread at a time.
    thread_local std::vector<float> wide;
    if (narrowed) wide.resize(static_cast<size_t>(vocab));
    float* out = narrowed ? wide.data() : static_cast<float*>(dst);
    if (targets[r] == graph::kIgnoreIndex) {
      std::fill(out, out + vocab, 0.f);
    } else {
      const float row_lse = lse[static_cast<size_t>(r)];
      vector_kernels().exp_shifted(row, out, columns, row_lse, scale);
      std::fill(out + columns, out + vocab, 0.f);  // padding: not in the softmax
      const int64_t column = local_column(targets[r], columns, shard);
      if (column >= 0) out[column] -= scale;
    }
    if (narrowed) cast(out, DType::f32, dst, out_dtype, static_cast<size_t>(vocab));
  }
}

}  // namespace

void cross_entropy(const Logits& logits, const int32_t* targets, int64_t rows, float* loss_sum,
                   const VocabShard* shard) {
  check_targets(targets, rows, full_vocab(logits.vocab, shard));
  const std::vector<float> lse = log_sum_exp(logits, rows, shard);
  write_loss(loss_total(logits, targets, lse, rows, shard), loss_sum, shard);
}

void cross_entropy_grad(const Logits& logits, const int32_t* targets, const float* d_loss,
                        int64_t rows, void* d_logits, DType out_dtype, const VocabShard* shard) {
  check_targets(targets, rows, full_vocab(logits.vocab, shard));
  const std::vector<float> lse = log_sum_exp(logits, rows, shard);
  write_gradient(logits, targets, *d_loss, lse, rows, d_logits, out_dtype, shard);
}

void cross_entropy_and_grad(void* logits_data, DType dtype, int64_t vocab, const int32_t* targets,
                            const float* d_loss, int64_t rows, float* loss_sum,
                            const VocabShard* shard) {
  const Logits logits{logits_data, dtype, vocab};
  check_targets(targets, rows, full_vocab(vocab, shard));
  const std::vector<float> lse = log_sum_exp(logits, rows, shard);
  // The targets' logits are read before the gradient is written over them.
  const double total = loss_total(logits, targets, lse, rows, shard);
  write_gradient(logits, targets, *d_loss, lse, rows, logits_data, dtype, shard);
  write_loss(total, loss_sum, shard);
}

}  // namespace tfm::cpu
