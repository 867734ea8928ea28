// Inputs for the emulated kernels: seeded values, their bf16 copies, and what bf16 storage keeps.
#pragma once

#include <cuda_bf16.h>

#include <vector>

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

}  // namespace tfm::testing
