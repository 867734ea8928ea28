// Pre-tokenizers cut normalized text into words that the model encodes independently
// (tokenizers' "pre_tokenizer" section).
#pragma once

#include <deque>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tfm::tokenizer {

// The words of one segment of text. Words are views into the segment or into `storage`, which
// holds text a pre-tokenizer rewrote (a deque, so earlier strings never move).
struct Words {
  std::vector<std::string_view> views;
  std::deque<std::string> storage;
  bool starts_text = true;  // the first word begins at offset 0 of the encoded input
  std::string_view own(std::string text) { return storage.emplace_back(std::move(text)); }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(Words& words) const = 0;
};

struct PreTokenizerSpec {
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // nullptr: the segment is a single word
  // A ByteLevel step was present: the model maps each byte of a word to its byte-level character.
  // The mapping is done there, on ids, rather than by rewriting every word here.
  bool byte_level = false;
};

PreTokenizerSpec make_pre_tokenizer(const nlohmann::json& spec, const std::string& where);

}  // namespace tfm::tokenizer
