#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace tfm::tokenizer {
namespace {

constexpr char32_t kMaxMapped = 0x144;  // the last character of the mapping is U+0143

struct Tables {
  std::array<std::string, 256> to_chars;
  std::array<int16_t, kMaxMapped> to_byte;  // -1 where a character is not in the mapping
};

const Tables& tables() {
  static const Tables t = [] {
    Tables result;
    result.to_byte.fill(-1);
    char32_t next_unprintable = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t c = printable ? static_cast<char32_t>(b) : next_unprintable++;
      append_utf8(result.to_chars[b], c);
      result.to_byte[c] = static_cast<int16_t>(b);
    }
    return result;
  }();
  return t;
}

}  // namespace

const std::array<std::string, 256>& byte_to_chars() { return tables().to_chars; }

bool chars_to_bytes(std::string_view text, std::string& out) {
  const auto& to_byte = tables().to_byte;
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t c = next_char(text, pos);
    if (c >= kMaxMapped || to_byte[c] < 0) return false;
    out += static_cast<char>(to_byte[c]);
  }
  return true;
}

std::string bytes_to_chars(std::string_view text) {
  const auto& to_chars = tables().to_chars;
  std::string out;
  out.reserve(text.size() * 2);
  for (unsigned char b : text) out += to_chars[b];
  return out;
}

}  // namespace tfm::tokenizer
