#include "tfm/dtype.h"

#include <cmath>

#include "tfm/error.h"

namespace tfm {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
  }
  throw Error("dtype_size: invalid dtype");
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
  }
  return "invalid";
}

DType parse_dtype(std::string_view text) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"f32", DType::f32},   {"float32", DType::f32}, {"float", DType::f32},
      {"F32", DType::f32},   {"bf16", DType::bf16},   {"bfloat16", DType::bf16},
      {"BF16", DType::bf16}, {"f16", DType::f16},     {"float16", DType::f16},
      {"half", DType::f16},  {"F16", DType::f16},     {"i32", DType::i32},
      {"int32", DType::i32}, {"I32", DType::i32},     {"i64", DType::i64},
      {"int64", DType::i64}, {"I64", DType::i64},
  };
  for (const Alias& alias : kAliases) {
    if (alias.name == text) return alias.dtype;
  }
  throw Error("unsupported dtype '" + std::string(text) +
              "' (supported: f32/float32, bf16/bfloat16, f16/float16, i32/int32, i64/int64)");
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
}

uint16_t f32_to_f16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): scale into the 10-bit mantissa with the hardware's rounding mode,
    // which is round-to-nearest-even by default.
    float magnitude;
    std::memcpy(&magnitude, &abs, 4);
    const float scaled = std::nearbyint(magnitude * 16777216.0f);  // 2^24: one ulp of f16 subnormal
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(scaled));
  }
  uint32_t rebased = abs - (112u << 23);  // exponent bias 127 -> 15
  rebased += 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rebased >> 13));
}

float f16_bits_to_f32(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) / 16777216.0f;
    std::memcpy(&bits, &magnitude, 4);
    bits |= sign;
  } else {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

namespace {

float load_as_f32(const void* src, DType dtype, size_t i) {
  switch (dtype) {
    case DType::f32:
      return static_cast<const float*>(src)[i];
    case DType::bf16:
      return bf16_bits_to_f32(static_cast<const uint16_t*>(src)[i]);
    case DType::f16:
      return f16_bits_to_f32(static_cast<const uint16_t*>(src)[i]);
    case DType::i32:
      return static_cast<float>(static_cast<const int32_t*>(src)[i]);
    case DType::i64:
      return static_cast<float>(static_cast<const int64_t*>(src)[i]);
  }
  return 0.0f;
}

void store_from_f32(void* dst, DType dtype, size_t i, float value) {
  switch (dtype) {
    case DType::f32:
      static_cast<float*>(dst)[i] = value;
      break;
    case DType::bf16:
      static_cast<uint16_t*>(dst)[i] = f32_to_bf16_bits(value);
      break;
    case DType::f16:
      static_cast<uint16_t*>(dst)[i] = f32_to_f16_bits(value);
      break;
    case DType::i32:
      static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(value);
      break;
    case DType::i64:
      static_cast<int64_t*>(dst)[i] = static_cast<int64_t>(value);
      break;
  }
}

}  // namespace

void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t count) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, count * dtype_size(src_dtype));
    return;
  }
  const bool integers = !is_floating(src_dtype) && !is_floating(dst_dtype);
  if (integers) {  // i32 <-> i64 must not pass through float and lose precision
    for (size_t i = 0; i < count; ++i) {
      const int64_t v = src_dtype == DType::i32 ? static_cast<const int32_t*>(src)[i]
                                                : static_cast<const int64_t*>(src)[i];
      if (dst_dtype == DType::i32)
        static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v);
      else
        static_cast<int64_t*>(dst)[i] = v;
    }
    return;
  }
  // The two conversions autocast runs on every step, as plain loops the compiler vectorizes.
  if (src_dtype == DType::f32 && dst_dtype == DType::bf16) {
    const auto* from = static_cast<const float*>(src);
    auto* to = static_cast<uint16_t*>(dst);
    for (size_t i = 0; i < count; ++i) to[i] = f32_to_bf16_bits(from[i]);
    return;
  }
  if (src_dtype == DType::bf16 && dst_dtype == DType::f32) {
    const auto* from = static_cast<const uint16_t*>(src);
    auto* to = static_cast<float*>(dst);
    for (size_t i = 0; i < count; ++i) to[i] = bf16_bits_to_f32(from[i]);
    return;
  }
  for (size_t i = 0; i < count; ++i)
    store_from_f32(dst, dst_dtype, i, load_as_f32(src, src_dtype, i));
}

}  // namespace tfm
