// Typed, optional fields of a JSON object (config.json and friends). Absent and null read as
// nullopt, as transformers treats them; a wrong type is an Error naming the file and the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tfm {

class JsonFields {
 public:
  // `where` prefixes messages, e.g. "config '/m/config.json'" or "... 'rope_scaling'".
  JsonFields(const nlohmann::json& object, std::string where);

  const nlohmann::json& object() const { return object_; }
  bool has(const char* key) const;
  std::optional<int64_t> integer(const char* key) const;
  std::optional<double> number(const char* key) const;
  std::optional<bool> boolean(const char* key) const;
  std::optional<std::string> string(const char* key) const;
  // An integer or a list of integers, e.g. eos_token_id.
  std::vector<int64_t> integers(const char* key) const;
  [[noreturn]] void fail(const std::string& problem) const;

 private:
  const nlohmann::json* get(const char* key) const;
  [[noreturn]] void wrong_type(const char* key, const char* expected) const;

  const nlohmann::json& object_;
  std::string where_;
};

}  // namespace tfm
