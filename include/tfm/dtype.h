// Element types a tensor can hold, and exact conversions between the 16-bit floats and f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tfm {

enum class DType : uint8_t { f32, bf16, f16, i32, i64 };

inline constexpr DType f32 = DType::f32;
inline constexpr DType bf16 = DType::bf16;
inline constexpr DType f16 = DType::f16;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", ...
// Accepts tfm names ("bf16"), torch names ("bfloat16", "float32") and safetensors names ("BF16").
// Throws tfm::Error naming the text and the accepted names.
DType parse_dtype(std::string_view text);
bool is_floating(DType dtype);

// Round to nearest even; NaN stays NaN (quiet), infinities and signed zeros are kept.
inline uint16_t f32_to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float bf16_bits_to_f32(uint16_t half) {
  uint32_t bits = static_cast<uint32_t>(half) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

uint16_t f32_to_f16_bits(float value);
float f16_bits_to_f32(uint16_t half);

// Bulk conversions between any two dtypes, element by element (contiguous buffers).
void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t count);

}  // namespace tfm
