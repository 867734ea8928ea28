#include "backends/cpu/step_operands.h"

#include "backends/cpu/kernels.h"

namespace tfm::cpu {

const float* f32_operand(const void* data, DType dtype, int64_t count, Scratch& widened) {
  if (dtype == DType::f32) return static_cast<const float*>(data);
  widened.resize(static_cast<size_t>(count));
  cast(data, dtype, widened.data(), DType::f32, static_cast<size_t>(count));
  return widened.data();
}

const float* f32_range(const void* data, DType dtype, int64_t first, int64_t count,
                       Scratch& widened) {
  return f32_operand(
      static_cast<const char*>(data) + first * static_cast<int64_t>(dtype_size(dtype)), dtype,
      count, widened);
}

}  // namespace tfm::cpu
