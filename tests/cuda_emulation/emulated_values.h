// Inputs for the emulated kernels: seeded values, their bf16 copies, what bf16 storage keeps, and
// routing weights as a router makes them.
#pragma once

#include <cuda_bf16.h>

#include <new>
#include <vector>

#include "ops/moe.h"
#include "support/random_values.h"

namespace tfm::testing {

inline std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& values) {
  std::vector<__nv_bfloat16> out;
  out.reserve(values.size());
  for (const float v : values) out.push_back(__float2bfloat16_rn(v));
  return out;
}

inline std::vector<float> widened(const std::vector<__nv_bfloat16>& values) {
  std::vector<float> out;
  out.reserve(values.size());
  for (const __nv_bfloat16 v : values) out.push_back(__bfloat162float(v));
  return out;
}

inline std::vector<float> widened(const std::vector<float>& values) { return values; }

// Storage 32-byte aligned, as a device allocation is at least (256), for the kernels' 16-byte
// vector loads: std::vector's alignment is only what operator new gives on the platform.
template <typename T>
struct Aligned32 {
  using value_type = T;
  Aligned32() = default;
  template <typename U>
  explicit Aligned32(const Aligned32<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{32}));
  }
  void deallocate(T* p, size_t n) { ::operator delete (p, n * sizeof(T), std::align_val_t{32}); }
  bool operator==(const Aligned32&) const { return true; }
};

inline std::vector<__nv_bfloat16, Aligned32<__nv_bfloat16>> aligned_bf16(
    const std::vector<float>& values) {
  const std::vector<__nv_bfloat16> narrow = to_bf16(values);
  return {narrow.begin(), narrow.end()};
}

// Each row of router logits [rows, experts] routed as ops::route_row.
inline std::vector<float> routed(const std::vector<float>& logits, int64_t rows, int64_t experts,
                                 int64_t top_k, bool normed) {
  std::vector<float> routing(logits.size());
  for (int64_t r = 0; r < rows; ++r) {
    ops::route_row(&logits[r * experts], experts, top_k, normed, &routing[r * experts]);
  }
  return routing;
}

}  // namespace tfm::testing
