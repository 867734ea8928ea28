// Added tokens (special tokens and tokens added after training) are found in the text before it
// is normalized and pre-tokenized, so a model never splits them (tokenizers' AddedVocabulary).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tfm::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;  // only matched when not inside a word
  bool lstrip = false;       // swallows whitespace on its left
  bool rstrip = false;       // swallows whitespace on its right
  bool normalized = true;    // matched in normalized text rather than in the input
  bool special = false;      // removed by decode(skip_special_tokens=true)
};

// A piece of text and, when it is an added token, its id.
struct Segment {
  std::string_view text;
  int32_t id;     // -1: ordinary text
  size_t offset;  // of text within what was split
};

// Finds a fixed set of tokens, leftmost first and longest at a position.
class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);
  bool empty() const { return tokens_.empty(); }
  // Splits `text` into ordinary segments and token segments, in order.
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  std::vector<AddedToken> tokens_;  // longest first, so the first hit at a position wins
  std::array<bool, 256> first_byte_{};
};

}  // namespace tfm::tokenizer
