// Seeded uniform random inputs for kernel tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace tfm::testing {

inline std::vector<float> random_values(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace tfm::testing
