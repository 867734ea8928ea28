// Values of the Jinja subset that chat templates use, with Python's semantics (truthiness,
// equality, str()), since transformers renders templates with Python's jinja2.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tfm::jinja {

class Value;
using Array = std::vector<Value>;
// Keys keep insertion order, like Python dicts (tojson prints them in that order).
using Object = std::vector<std::pair<std::string, Value>>;

struct Undefined {};
struct None {};

class Value {
 public:
  Value() = default;
  Value(None) : data_(None{}) {}
  Value(bool b) : data_(b) {}
  Value(int64_t i) : data_(i) {}
  Value(int i) : data_(int64_t{i}) {}
  Value(double d) : data_(d) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(Array a) : data_(std::make_shared<Array>(std::move(a))) {}
  Value(Object o) : data_(std::make_shared<Object>(std::move(o))) {}
  static Value from_json(const nlohmann::json& json);

  bool is_undefined() const { return std::holds_alternative<Undefined>(data_); }
  bool is_none() const { return std::holds_alternative<None>(data_); }
  bool is_bool() const { return std::holds_alternative<bool>(data_); }
  bool is_int() const { return std::holds_alternative<int64_t>(data_); }
  bool is_number() const { return is_int() || std::holds_alternative<double>(data_); }
  bool is_string() const { return std::holds_alternative<std::string>(data_); }
  bool is_array() const { return std::holds_alternative<std::shared_ptr<Array>>(data_); }
  bool is_object() const { return std::holds_alternative<std::shared_ptr<Object>>(data_); }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;  // ints and bools
  double as_double() const;
  const std::string& as_string() const { return std::get<std::string>(data_); }
  // Arrays and objects are shared, so a namespace() set inside a loop is seen outside it.
  Array& array() const { return *std::get<std::shared_ptr<Array>>(data_); }
  Object& object() const { return *std::get<std::shared_ptr<Object>>(data_); }

  const Value* find(const std::string& key) const;  // objects only; nullptr when absent
  void set(const std::string& key, Value value) const;

  bool truthy() const;
  std::string str() const;                                    // Python str()
  std::string to_json(int indent = -1, int depth = 0) const;  // Python json.dumps, unicode kept
  std::string type_name() const;
  friend bool operator==(const Value& a, const Value& b);

 private:
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<Array>,
               std::shared_ptr<Object>>
      data_;
};

}  // namespace tfm::jinja
