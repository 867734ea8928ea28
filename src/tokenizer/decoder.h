// Decoders turn the tokens of a sequence back into text (tokenizers' "decoder" section). They
// work on bytes: text that is not valid UTF-8 yet is only made valid at the very end, so that
// a streaming decoder can wait for the rest of a character.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace tfm::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode(std::vector<std::string>& tokens) const = 0;
};

// Returns nullptr for a JSON null (tokens are then joined with spaces).
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& where);

}  // namespace tfm::tokenizer
