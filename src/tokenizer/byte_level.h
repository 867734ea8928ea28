// GPT-2's reversible byte <-> printable character mapping used by ByteLevel pre-tokenizers and
// decoders: bytes that are printable Latin-1 map to themselves, the others to U+0100 onwards.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tfm::tokenizer {

// The UTF-8 encoding of the character standing for each byte.
const std::array<std::string, 256>& byte_to_chars();

// Maps each character of `text` back to its byte; returns false (leaving `out` partly written)
// when a character is not in the mapping.
bool chars_to_bytes(std::string_view text, std::string& out);

// `text` with every byte replaced by its character.
std::string bytes_to_chars(std::string_view text);

}  // namespace tfm::tokenizer
