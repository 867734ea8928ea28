#include "ops/reference.h"

namespace tfm::ops::reference {

void linear(const float* x, const float* w, const float* bias, int64_t m, int64_t n, int64_t k,
            float* out) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias != nullptr ? bias[j] : 0.0;
      for (int64_t p = 0; p < k; ++p) acc += static_cast<double>(x[i * k + p]) * w[j * k + p];
      out[i * n + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace tfm::ops::reference
