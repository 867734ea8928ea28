#include "tokenizer/json_spec.h"

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
