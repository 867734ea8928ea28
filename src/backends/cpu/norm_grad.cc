// RMSNorm's backward pass. With r = 1 / sqrt(mean(x^2) + eps) and y = w * x * r:
//   dx = r * w * dy - x * r^3 * mean(w * dy * x),   dw = sum over rows of dy * x * r.
#include <omp.h>

#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"

namespace tfm::cpu {
namespace {

float inv_rms(const float* row, int64_t hidden, float eps) {
  double sum_sq = 0;
  for (int64_t i = 0; i < hidden; ++i) sum_sq += static_cast<double>(row[i]) * row[i];
  return static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(hidden) + eps));
}

}  // namespace

void rms_norm_grad_input(const float* x, const float* w, const float* dy, int64_t rows,
                         int64_t hidden, float eps, float* dx) {
#pragma omp parallel for schedule(static) if (rows * hidden > kParallelMinElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * hidden;
    const float* dyr = dy + r * hidden;
    const double rr = inv_rms(xr, hidden, eps);
    double dot = 0;
    for (int64_t i = 0; i < hidden; ++i) dot += static_cast<double>(w[i]) * dyr[i] * xr[i];
    const double coef = rr * rr * rr * dot / static_cast<double>(hidden);
    for (int64_t i = 0; i < hidden; ++i)
      dx[r * hidden + i] = static_cast<float>(rr * w[i] * dyr[i] - xr[i] * coef);
  }
}

void rms_norm_grad_weight(const float* x, const float* dy, int64_t rows, int64_t hidden, float eps,
                          float* dw, bool accumulate) {
  // Per-thread partial sums added in thread order: the same threads give the same bits every
  // step, which resuming a run relies on.
  const int threads = rows * hidden > kParallelMinElements ? omp_get_max_threads() : 1;
  std::vector<double> partial(static_cast<size_t>(threads * hidden), 0.0);
#pragma omp parallel num_threads(threads)
  {
    double* mine = partial.data() + omp_get_thread_num() * hidden;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * hidden;
      const double rr = inv_rms(xr, hidden, eps);
      for (int64_t i = 0; i < hidden; ++i) mine[i] += dy[r * hidden + i] * xr[i] * rr;
    }
  }
  for (int64_t i = 0; i < hidden; ++i) {
    double sum = 0;
    for (int t = 0; t < threads; ++t) sum += partial[static_cast<size_t>(t * hidden + i)];
    // Accumulating, the f32 sum is added as an accumulation step would add it.
    dw[i] = accumulate ? dw[i] + static_cast<float>(sum) : static_cast<float>(sum);
  }
}

}  // namespace tfm::cpu
