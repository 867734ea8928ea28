#include "io/json_fields.h"

#include "tfm/error.h"

namespace tfm {

JsonFields::JsonFields(const nlohmann::json& object, std::string where)
    : object_(object), where_(std::move(where)) {
  if (!object_.is_object()) fail("is not a JSON object");
}

void JsonFields::fail(const std::string& problem) const { throw Error(where_ + ": " + problem); }

void JsonFields::wrong_type(const char* key, const char* expected) const {
  fail("'" + std::string(key) + "' must be " + expected + ", got " + get(key)->dump());
}

const nlohmann::json* JsonFields::get(const char* key) const {
  auto it = object_.find(key);
  return it == object_.end() || it->is_null() ? nullptr : &*it;
}

bool JsonFields::has(const char* key) const { return get(key) != nullptr; }

std::optional<int64_t> JsonFields::integer(const char* key) const {
  const nlohmann::json* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX}) {
      wrong_type(key, "an integer that fits in 64 bits");
    }
    return v->get<int64_t>();
  }
  wrong_type(key, "an integer");
}

std::optional<double> JsonFields::number(const char* key) const {
  const nlohmann::json* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) wrong_type(key, "a number");
  return v->get<double>();
}

std::optional<bool> JsonFields::boolean(const char* key) const {
  const nlohmann::json* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) wrong_type(key, "true or false");
  return v->get<bool>();
}

std::optional<std::string> JsonFields::string(const char* key) const {
  const nlohmann::json* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) wrong_type(key, "a string");
  return v->get<std::string>();
}

std::vector<int64_t> JsonFields::integers(const char* key) const {
  const nlohmann::json* v = get(key);
  if (v == nullptr) return {};
  if (v->is_number_integer()) return {*integer(key)};
  if (!v->is_array()) wrong_type(key, "an integer or a list of integers");
  std::vector<int64_t> out;
  for (const nlohmann::json& item : *v) {
    if (!item.is_number_integer()) wrong_type(key, "an integer or a list of integers");
    out.push_back(item.get<int64_t>());
  }
  return out;
}

}  // namespace tfm
