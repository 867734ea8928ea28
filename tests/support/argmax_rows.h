// Rows of logits for argmax's edge cases, shared by the CPU kernel's test and the CUDA kernel's
// (under emulation): both must give std::max_element's index (the first of equal largest; a NaN
// is never larger, so a row that starts with one gives 0).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/random_values.h"

namespace tfm::testing {

inline constexpr int64_t kArgmaxRows = 9;

// kArgmaxRows rows of n (n >= 4): random, then each row after the first with one case.
inline std::vector<float> argmax_edge_rows(int64_t n) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = random_values(static_cast<size_t>(kArgmaxRows * n), 9, -5.f, 5.f);
  float* r1 = x.data() + n;  // a tie: the first of equals wins
  r1[n / 3] = r1[n - 2] = r1[n / 5] = 9.f;
  float* r2 = x.data() + 2 * n;  // all -inf: index 0
  std::fill(r2, r2 + n, -kInf);
  x[3 * n] = nan;  // a NaN first: index 0
  float* r4 =
      x.data() + 4 * n;  // the largest last; NaNs in the middle and at 1024, a CPU block's start
  r4[n - 1] = 7.f;
  r4[n / 2] = r4[std::min<int64_t>(n - 2, 1024)] = nan;
  float* r5 = x.data() + 5 * n;  // all NaN: index 0
  std::fill(r5, r5 + n, nan);
  float* r6 = x.data() + 6 * n;  // +inf, -inf elsewhere
  std::fill(r6, r6 + n, -kInf);
  r6[n - 3] = kInf;
  float* r7 = x.data() + 7 * n;  // the first value the largest, equalled later
  r7[0] = r7[n - 1] = 6.f;
  float* r8 = x.data() + 8 * n;  // -0 before +0, all else negative: the -0
  std::fill(r8, r8 + n, -1.f);
  r8[n / 4 + 1] = -0.f;
  r8[n - 1] = 0.f;
  return x;
}

}  // namespace tfm::testing
