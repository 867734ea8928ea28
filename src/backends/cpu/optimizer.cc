// The optimizer's arithmetic on host buffers: parallel over fixed chunks, large enough to
// amortize scheduling and small enough that a model's few big matrices spread over every core.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/lane_sum.h"

namespace tfm::cpu {
namespace {

constexpr int64_t kChunkElements = int64_t{1} << 15;

int64_t chunks_of(int64_t n) { return (n + kChunkElements - 1) / kChunkElements; }

}  // namespace

void adamw_update(const ops::AdamWScalars& s, float decay, float* p, const float* g, float* m,
                  float* v, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kChunkElements)
  for (int64_t c = 0; c < chunks_of(n); ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunkElements);
    for (int64_t i = c * kChunkElements; i < end; ++i) {
      ops::adamw_update(s, decay, p[i], g[i], m[i], v[i]);
    }
  }
}

double sum_squares(const float* x, int64_t n) {
  std::vector<double> partial(static_cast<size_t>(chunks_of(n)), 0.0);
#pragma omp parallel for schedule(static) if (n > kChunkElements)
  for (int64_t c = 0; c < chunks_of(n); ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunkElements);
    const float* chunk = x + c * kChunkElements;
    partial[static_cast<size_t>(c)] = lane_sum(end - c * kChunkElements, [chunk](int64_t i) {
      return double{chunk[i]} * double{chunk[i]};
    });
  }
  double total = 0.0;
  for (double sum : partial) total += sum;
  return total;
}

}  // namespace tfm::cpu
