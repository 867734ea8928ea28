// UTF-8 helpers with the semantics of Rust's str/char, which `tokenizers` is written in.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tfm::tokenizer {

// Byte offset of the first invalid sequence, or npos when `text` is valid UTF-8.
size_t find_invalid_utf8(std::string_view text);

// Length of the longest prefix that does not end inside an unfinished multi-byte character.
size_t complete_utf8_prefix(std::string_view bytes);

// Like Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Decodes the character starting at `pos` of valid UTF-8 and advances `pos` past it.
char32_t next_char(std::string_view text, size_t& pos);
// Decodes the character ending at `end` of valid UTF-8 (end > 0) and moves `end` to its start.
char32_t prev_char(std::string_view text, size_t& end);
void append_utf8(std::string& out, char32_t c);

// Length in bytes of a character from its lead byte (1 for a stray continuation byte).
inline size_t utf8_char_length(unsigned char lead) {
  return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

bool is_whitespace(char32_t c);    // Rust char::is_whitespace (White_Space property)
bool is_alphanumeric(char32_t c);  // Rust char::is_alphanumeric (letters and numbers)
bool is_numeric(char32_t c);       // Rust char::is_numeric (Nd, Nl, No)

}  // namespace tfm::tokenizer
