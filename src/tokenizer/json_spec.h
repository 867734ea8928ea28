// Reading the component specs of tokenizer.json with errors that name the file and the field.
#pragma once

#include <cstdint>
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
// Optional fields of a component spec: absent or null give `fallback`; another type is an Error
// naming the field, as the tokenizers library refuses such a file.
bool flag_field(const nlohmann::json& spec, const char* key, bool fallback,
                const std::string& where);
int64_t int_field(const nlohmann::json& spec, const char* key, int64_t fallback,
                  const std::string& where);
std::string text_field(const nlohmann::json& spec, const char* key, const std::string& fallback,
                       const std::string& where);
// A token id: an integer in [0, 2^31), else an Error naming `what`.
int32_t token_id(const nlohmann::json& value, const std::string& what, const std::string& where);
// A Split/Replace "pattern": {"String": s} (matched literally) or {"Regex": r}, as PCRE2 source.
std::string pattern_of(const nlohmann::json& spec, const std::string& where);

Error unsupported(const std::string& where, const std::string& section, const std::string& type,
                  const std::string& supported);

}  // namespace tfm::tokenizer
