// Reading tokenizer.json. The vocabulary and merges (most of an 11 MB file) are read straight into
// containers with simdjson; the small sections become nlohmann::json for the component factories.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/vocab.h"

namespace tfm::tokenizer {

struct TokenizerJson {
  nlohmann::json root;  // every section, with model.vocab and model.merges left out
  Vocab vocab;
  std::vector<std::pair<std::string_view, std::string_view>> merges;  // into merge_text
  std::vector<char> merge_text;  // a vector: moving it keeps the views valid
};

// Throws tfm::Error naming `where` for unreadable files, invalid JSON and malformed merges.
TokenizerJson read_tokenizer_json(const std::string& path, const std::string& where);

}  // namespace tfm::tokenizer
