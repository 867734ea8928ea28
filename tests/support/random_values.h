// Seeded random inputs for kernel and gradient tests, and the closeness check they share.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tfm/tensor.h"

namespace tfm::testing {

inline std::vector<float> random_values(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Normal values (mean 0, standard deviation `scale`) drawn from `rng`.
inline Tensor random_tensor(const Shape& shape, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
  for (float& v : values) v = normal(rng);
  return Tensor::from_vector(values, shape);
}

// The values as a backend stores them in `dtype` (bf16 keeps 8 bits of mantissa).
inline std::vector<float> rounded(const std::vector<float>& v, DType dtype) {
  return Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())}).to(dtype).to_f32_vector();
}

// The bf16 bit patterns of `v` (rounded to nearest even), and back.
inline std::vector<uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16_bits(v[i]);
  return out;
}
inline std::vector<float> floats_of_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_bits_to_f32(v[i]);
  return out;
}

// Every element within tol relative to (1 + |want|); NaN never passes.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol,
                         const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.f + std::fabs(want[i]))) << what << " at " << i;
  }
}

}  // namespace tfm::testing
