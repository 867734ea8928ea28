// Reading the component specs of tokenizer.json with errors that name the file and the field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tfm/error.h"

namespace tfm::tokenizer {

// spec["type"], checked to be a string; `section` is e.g. "normalizer".
std::string type_of(const nlohmann::json& spec, const std::string& section,
                    const std::string& where);
std::string string_field(const nlohmann::json& spec, const char* key, const std::string& where);
const nlohmann::json& array_field(const nlohmann::json& spec, const char* key,
                                  const std::string& where);
// A Split/Replace "pattern": {"String": s} (matched literally) or {"Regex": r}, as PCRE2 source.
std::string pattern_of(const nlohmann::json& spec, const std::string& where);

Error unsupported(const std::string& where, const std::string& section, const std::string& type,
                  const std::string& supported);

}  // namespace tfm::tokenizer
