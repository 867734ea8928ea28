#include "tokenizer/jinja/value.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "tfm/error.h"

namespace tfm::jinja {

Value Value::from_json(const nlohmann::json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value(None{});
    case nlohmann::json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return Value(json.get<int64_t>());
    case nlohmann::json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::json::value_t::string:
      return Value(json.get<std::string>());
    case nlohmann::json::value_t::array: {
      Array array;
      for (const auto& item : json) array.push_back(from_json(item));
      return Value(std::move(array));
    }
    case nlohmann::json::value_t::object: {
      Object object;
      for (const auto& [key, item] : json.items()) object.emplace_back(key, from_json(item));
      return Value(std::move(object));
    }
    default:
      throw Error("chat template: unsupported JSON value " + json.dump());
  }
}

int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  if (is_int()) return std::get<int64_t>(data_);
  if (is_number()) return static_cast<int64_t>(std::get<double>(data_));
  throw Error("chat template: expected an integer, got " + type_name());
}

double Value::as_double() const {
  return std::holds_alternative<double>(data_) ? std::get<double>(data_)
                                               : static_cast<double>(as_int());
}

const Value* Value::find(const std::string& key) const {
  if (!is_object()) return nullptr;
  for (const auto& [k, v] : object()) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::set(const std::string& key, Value value) const {
  for (auto& [k, v] : object()) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  object().emplace_back(key, std::move(value));
}

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_number()) return as_double() != 0;
  if (is_string()) return !as_string().empty();
  if (is_array()) return !array().empty();
  return !object().empty();
}

std::string Value::str() const {
  if (is_undefined()) return "";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_number()) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%.17g", as_double());
    return buffer;
  }
  if (is_string()) return as_string();
  return to_json();
}

std::string Value::to_json(int indent, int depth) const {
  if (is_undefined() || is_none()) return "null";
  if (is_bool()) return as_bool() ? "true" : "false";
  if (is_number()) return str();
  if (is_string()) {
    return nlohmann::json(as_string())
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  // json.dumps separators: ", " and ": " without indent; "," and newlines with it.
  const std::string newline =
      indent < 0 ? "" : "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ');
  const std::string close =
      indent < 0 ? "" : "\n" + std::string(static_cast<size_t>(indent * depth), ' ');
  const std::string comma = indent < 0 ? ", " : ",";
  std::string out;
  if (is_array()) {
    if (array().empty()) return "[]";
    out = "[";
    for (size_t i = 0; i < array().size(); ++i) {
      out += (i ? comma : "") + newline + array()[i].to_json(indent, depth + 1);
    }
    return out + close + "]";
  }
  if (object().empty()) return "{}";
  out = "{";
  for (size_t i = 0; i < object().size(); ++i) {
    const auto& [key, value] = object()[i];
    out +=
        (i ? comma : "") + newline + Value(key).to_json() + ": " + value.to_json(indent, depth + 1);
  }
  return out + close + "}";
}

std::string Value::type_name() const {
  static const char* const kNames[] = {"undefined", "none",   "bool", "int",
                                       "float",     "string", "list", "dict"};
  return kNames[data_.index()];
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() == b.as_double();
  if (a.is_bool() && b.is_number()) return a.as_double() == b.as_double();
  if (a.data_.index() != b.data_.index()) return false;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_bool()) return a.as_bool() == b.as_bool();
  if (a.is_array()) return a.array() == b.array();
  if (a.is_object()) return a.object() == b.object();
  return true;  // undefined == undefined, none == none
}

}  // namespace tfm::jinja
