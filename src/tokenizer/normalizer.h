// Normalizers rewrite text before it is split into words (tokenizers' "normalizer" section).
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace tfm::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// `where` names the file for error messages. Returns nullptr for a JSON null.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& where);

}  // namespace tfm::tokenizer
