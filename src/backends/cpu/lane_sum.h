// Long sums in double, as the norms' gradients, the loss and the gradient norm keep them.
#pragma once

#include <cstdint>

namespace tfm::cpu {

// The sum of term(i) over i < n in double, kept in 8 lanes that the compiler vectorizes: one
// running sum would wait on each double add's latency. The lanes are added in one fixed order, so
// a sum gives the same bits on every call.
template <typename Term>
double lane_sum(int64_t n, Term term) {
  constexpr int64_t kLanes = 8;
  double lanes[kLanes] = {};
  const int64_t whole = n - n % kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += term(i + l);
  }
  for (int64_t i = whole; i < n; ++i) lanes[i - whole] += term(i);
  double sum = 0;
  for (const double lane : lanes) sum += lane;
  return sum;
}

}  // namespace tfm::cpu
