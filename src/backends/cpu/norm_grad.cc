// RMSNorm's backward pass. With r = 1 / sqrt(mean(x^2) + eps) and y = w * x * r:
//   dx = r * w * dy - x * r^3 * mean(w * dy * x),   dw = sum over rows of dy * x * r.
#include <omp.h>

#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/lane_sum.h"

namespace tfm::cpu {
namespace {

float inv_rms(const float* row, int64_t hidden, float eps) {
  const double sum_sq =
      lane_sum(hidden, [row](int64_t i) { return static_cast<double>(row[i]) * row[i]; });
  return static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(hidden) + eps));
}

void grad_input_row(const float* xr, const float* w, const float* dyr, int64_t hidden, double rr,
                    float* dxr) {
  const double dot =
      lane_sum(hidden, [=](int64_t i) { return static_cast<double>(w[i]) * dyr[i] * xr[i]; });
  const double coef = rr * rr * rr * dot / static_cast<double>(hidden);
  for (int64_t i = 0; i < hidden; ++i)
    dxr[i] = static_cast<float>(rr * w[i] * dyr[i] - xr[i] * coef);
}

void add_weight_grad_row(const float* xr, const float* dyr, int64_t hidden, double rr,
                         double* sums) {
  for (int64_t i = 0; i < hidden; ++i) sums[i] += dyr[i] * xr[i] * rr;
}

// The weight gradient's sums run per thread over a static split of the rows and are added in
// thread order: the same threads give the same bits every step, which resuming a run relies on,
// and the fused step below gives the bits of the two steps it replaces.
int weight_grad_threads(int64_t rows, int64_t hidden) {
  return rows * hidden > kParallelMinElements ? omp_get_max_threads() : 1;
}

void finish_weight_grad(const std::vector<double>& partial, int threads, int64_t hidden, float* dw,
                        bool accumulate) {
  for (int64_t i = 0; i < hidden; ++i) {
    double sum = 0;
    for (int t = 0; t < threads; ++t) sum += partial[static_cast<size_t>(t * hidden + i)];
    // Accumulating, the f32 sum is added as an accumulation step would add it.
    dw[i] = accumulate ? dw[i] + static_cast<float>(sum) : static_cast<float>(sum);
  }
}

// Row r of `rows` as f32: where it lies, or widened into `widened`.
const float* row_as_f32(Floats rows, int64_t r, int64_t hidden, float* widened) {
  const size_t at = static_cast<size_t>(r * hidden) * dtype_size(rows.dtype);
  const void* row = static_cast<const char*>(rows.data) + at;
  if (rows.dtype == DType::f32) return static_cast<const float*>(row);
  convert_elements(row, rows.dtype, widened, DType::f32, static_cast<size_t>(hidden));
  return widened;
}

}  // namespace

void rms_norm_grad_input(const float* x, const float* w, const float* dy, int64_t rows,
                         int64_t hidden, float eps, float* dx) {
#pragma omp parallel for schedule(static) if (rows * hidden > kParallelMinElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * hidden;
    grad_input_row(xr, w, dy + r * hidden, hidden, inv_rms(xr, hidden, eps), dx + r * hidden);
  }
}

void rms_norm_grad_weight(const float* x, const float* dy, int64_t rows, int64_t hidden, float eps,
                          float* dw, bool accumulate) {
  const int threads = weight_grad_threads(rows, hidden);
  std::vector<double> partial(static_cast<size_t>(threads * hidden), 0.0);
#pragma omp parallel num_threads(threads)
  {
    double* mine = partial.data() + omp_get_thread_num() * hidden;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * hidden;
      add_weight_grad_row(xr, dy + r * hidden, hidden, inv_rms(xr, hidden, eps), mine);
    }
  }
  finish_weight_grad(partial, threads, hidden, dw, accumulate);
}

void rms_norm_grads(Floats x, const float* w, Floats dy, const float* residual, int64_t rows,
                    int64_t hidden, float eps, void* dx, DType dx_dtype, float* dw_acc,
                    const RopeGradRows* rope, uint16_t* bf16_copy) {
  if (rope != nullptr) TokenRotation::check(hidden);
  const int threads = weight_grad_threads(rows, hidden);
  std::vector<double> partial(static_cast<size_t>(threads * hidden), 0.0);
  const size_t dx_row_bytes = static_cast<size_t>(hidden) * dtype_size(dx_dtype);
#pragma omp parallel num_threads(threads)
  {
    double* mine = partial.data() + omp_get_thread_num() * hidden;
    // This thread's rows, widened or rotated, and its dx row before narrowing.
    std::vector<float> x_row(static_cast<size_t>(hidden)), dy_row(x_row.size()),
        rotated_row(x_row.size()), dx_row_f32(x_row.size());
    TokenRotation rotation;
    int64_t rotation_token = -1;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = row_as_f32(x, r, hidden, x_row.data());
      const float* dyr = row_as_f32(dy, r, hidden, dy_row.data());
      if (rope != nullptr) {
        // Rows are [batch, seq, heads]: a token's heads follow one another.
        const int64_t token = r / rope->heads;
        if (token != rotation_token) {
          rotation.set(rope->positions[token], rope->inv_freq, hidden, rope->attention_scaling,
                       -1.f);
          rotation_token = token;
        }
        rotation.apply(dyr, rotated_row.data());
        dyr = rotated_row.data();
      }
      char* dx_row = static_cast<char*>(dx) + static_cast<size_t>(r) * dx_row_bytes;
      float* dxr = dx_dtype == DType::f32 ? reinterpret_cast<float*>(dx_row) : dx_row_f32.data();
      const double rr = inv_rms(xr, hidden, eps);
      grad_input_row(xr, w, dyr, hidden, rr, dxr);
      if (residual != nullptr) {
        for (int64_t i = 0; i < hidden; ++i) dxr[i] += residual[r * hidden + i];
      }
      const auto count = static_cast<size_t>(hidden);
      if (dx_dtype != DType::f32) convert_elements(dxr, DType::f32, dx_row, dx_dtype, count);
      if (bf16_copy != nullptr) {
        convert_elements(dxr, DType::f32, bf16_copy + r * hidden, DType::bf16, count);
      }
      add_weight_grad_row(xr, dyr, hidden, rr, mine);
    }
  }
  finish_weight_grad(partial, threads, hidden, dw_acc, true);
}

}  // namespace tfm::cpu
