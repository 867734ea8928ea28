#include "tokenizer/json_spec.h"

#include <cstdint>

#include "tokenizer/regex.h"

namespace tfm::tokenizer {

std::string type_of(const nlohmann::json& spec, const std::string& section,
                    const std::string& where) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    throw Error(where + ": " + section + " has no \"type\" string: " + spec.dump().substr(0, 200));
  }
  return spec["type"].get<std::string>();
}

std::string string_field(const nlohmann::json& spec, const char* key, const std::string& where) {
  if (!spec.contains(key) || !spec[key].is_string()) {
    throw Error(where + ": expected a string \"" + key + "\" in " + spec.dump().substr(0, 200));
  }
  return spec[key].get<std::string>();
}

const nlohmann::json& array_field(const nlohmann::json& spec, const char* key,
                                  const std::string& where) {
  if (!spec.contains(key) || !spec[key].is_array()) {
    throw Error(where + ": expected an array \"" + key + "\" in " + spec.dump().substr(0, 200));
  }
  return spec[key];
}

namespace {

// spec[key] where present and not null, else nullptr; a spec that is not an object has no fields.
const nlohmann::json* optional_field(const nlohmann::json& spec, const char* key,
                                     const std::string& where) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object()) {
    throw Error(where + ": expected an object holding \"" + key + "\", got " +
                spec.dump().substr(0, 200));
  }
  const auto it = spec.find(key);
  return it == spec.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void wrong_type(const char* key, const char* expected, const nlohmann::json& value,
                             const std::string& where) {
  throw Error(where + ": \"" + key + "\" must be " + expected + ", got " +
              value.dump().substr(0, 200));
}

}  // namespace

bool flag_field(const nlohmann::json& spec, const char* key, bool fallback,
                const std::string& where) {
  const nlohmann::json* v = optional_field(spec, key, where);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) wrong_type(key, "true or false", *v, where);
  return v->get<bool>();
}

int64_t int_field(const nlohmann::json& spec, const char* key, int64_t fallback,
                  const std::string& where) {
  const nlohmann::json* v = optional_field(spec, key, where);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer()) wrong_type(key, "an integer", *v, where);
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX}) {
    wrong_type(key, "an integer below 2^63", *v, where);
  }
  return v->get<int64_t>();
}

std::string text_field(const nlohmann::json& spec, const char* key, const std::string& fallback,
                       const std::string& where) {
  const nlohmann::json* v = optional_field(spec, key, where);
  if (v == nullptr) return fallback;
  if (!v->is_string()) wrong_type(key, "a string", *v, where);
  return v->get<std::string>();
}

int32_t token_id(const nlohmann::json& value, const std::string& what, const std::string& where) {
  const bool in_range =
      value.is_number_unsigned()
          ? value.get<uint64_t>() <= INT32_MAX
          : value.is_number_integer() && value.get<int64_t>() >= 0 &&
                value.get<int64_t>() <= INT32_MAX;
  if (!in_range) {
    throw Error(where + ": " + what + " must be a token id (an integer from 0 to 2^31 - 1), got " +
                value.dump().substr(0, 200));
  }
  return static_cast<int32_t>(value.get<int64_t>());
}

std::string pattern_of(const nlohmann::json& spec, const std::string& where) {
  if (spec.contains("pattern") && spec["pattern"].is_object()) {
    const auto& pattern = spec["pattern"];
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      return pattern["Regex"].get<std::string>();
    }
    if (pattern.contains("String") && pattern["String"].is_string()) {
      return Regex::escape(pattern["String"].get<std::string>());
    }
  }
  throw Error(where + ": expected \"pattern\": {\"String\": ...} or {\"Regex\": ...} in " +
              spec.dump().substr(0, 200));
}

Error unsupported(const std::string& where, const std::string& section, const std::string& type,
                  const std::string& supported) {
  return Error(where + ": " + section + " type '" + type +
               "' is not supported (supported: " + supported + ")");
}

}  // namespace tfm::tokenizer
