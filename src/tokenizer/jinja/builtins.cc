#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cmath>

#include "tfm/error.h"
#include "tokenizer/utf8.h"

namespace tfm::jinja {
namespace {

[[noreturn]] void fail(const std::string& what) { throw Error("chat template: " + what); }

// Python str characters: code points, each as its UTF-8 bytes.
std::vector<std::string> characters(const std::string& text) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t begin = pos;
    pos += tokenizer::utf8_char_length(static_cast<unsigned char>(text[pos]));
    out.push_back(text.substr(begin, pos - begin));
  }
  return out;
}

bool is_strip_char(const std::string& c, const Value* chars) {
  if (chars && !chars->is_none()) return chars->as_string().find(c) != std::string::npos;
  size_t pos = 0;
  return tokenizer::is_whitespace(tokenizer::next_char(c, pos));
}

std::string strip(const std::string& text, const Value* chars, bool left, bool right) {
  const auto c = characters(text);
  size_t begin = 0, end = c.size();
  while (left && begin < end && is_strip_char(c[begin], chars)) ++begin;
  while (right && end > begin && is_strip_char(c[end - 1], chars)) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) out += c[i];
  return out;
}

Array split(const std::string& text, const Value* separator) {
  Array parts;
  if (separator == nullptr || separator->is_none()) {  // runs of whitespace, no empty parts
    std::string word;
    for (const auto& c : characters(text)) {
      if (is_strip_char(c, nullptr)) {
        if (!word.empty()) parts.emplace_back(std::move(word));
        word.clear();
      } else {
        word += c;
      }
    }
    if (!word.empty()) parts.emplace_back(std::move(word));
    return parts;
  }
  const std::string& sep = separator->as_string();
  if (sep.empty()) fail("split() with an empty separator");
  size_t pos = 0;
  for (size_t hit; (hit = text.find(sep, pos)) != std::string::npos; pos = hit + sep.size()) {
    parts.emplace_back(text.substr(pos, hit - pos));
  }
  parts.emplace_back(text.substr(pos));
  return parts;
}

const Value* arg(const std::vector<Value>& args, size_t i) {
  return i < args.size() ? &args[i] : nullptr;
}

const Value* kwarg(const Kwargs& kwargs, const char* name) {
  for (const auto& [key, value] : kwargs) {
    if (key == name) return &value;
  }
  return nullptr;
}

int64_t python_index(int64_t i, size_t size) { return i < 0 ? i + static_cast<int64_t>(size) : i; }

}  // namespace

size_t length(const Value& value) {
  if (value.is_string()) return characters(value.as_string()).size();
  if (value.is_array()) return value.array().size();
  if (value.is_object()) return value.object().size();
  fail("length of " + value.type_name());
}

Value index_value(const Value& target, const Value& index) {
  if (target.is_object()) {
    const Value* found = index.is_string() ? target.find(index.as_string()) : nullptr;
    return found ? *found : Value();
  }
  if (!index.is_int()) fail("index of " + target.type_name() + " must be an integer");
  if (target.is_array()) {
    const int64_t i = python_index(index.as_int(), target.array().size());
    if (i < 0 || i >= static_cast<int64_t>(target.array().size())) return Value();
    return target.array()[i];
  }
  if (target.is_string()) {
    const auto c = characters(target.as_string());
    const int64_t i = python_index(index.as_int(), c.size());
    if (i < 0 || i >= static_cast<int64_t>(c.size())) return Value();
    return Value(c[i]);
  }
  return Value();
}

Value slice_value(const Value& target, const Value* start, const Value* stop, const Value* step) {
  const int64_t s = step && !step->is_none() ? step->as_int() : 1;
  if (s == 0) fail("slice step cannot be zero");
  Array items;
  if (target.is_array()) {
    items = target.array();
  } else if (target.is_string()) {
    for (auto& c : characters(target.as_string())) items.emplace_back(std::move(c));
  } else {
    fail("cannot slice " + target.type_name());
  }
  const auto n = static_cast<int64_t>(items.size());
  const auto bound = [&](const Value* v, int64_t fallback) {
    if (!v || v->is_none()) return fallback;
    const int64_t i = python_index(v->as_int(), items.size());
    return s > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t from = bound(start, s > 0 ? 0 : n - 1), to = bound(stop, s > 0 ? n : -1);
  Array out;
  for (int64_t i = from; s > 0 ? i < to : i > to; i += s) out.push_back(items[i]);
  if (target.is_array()) return Value(std::move(out));
  std::string text;
  for (const auto& c : out) text += c.as_string();
  return Value(std::move(text));
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    return item.is_string() && container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_array()) {
    const auto& a = container.array();
    return std::find(a.begin(), a.end(), item) != a.end();
  }
  if (container.is_object()) return item.is_string() && container.find(item.as_string());
  return false;
}

Value apply_filter(const std::string& name, const Value& target, const std::vector<Value>& args,
                   const Kwargs& kwargs) {
  if (name == "length" || name == "count") return Value(static_cast<int64_t>(length(target)));
  if (name == "tojson") {
    const Value* indent = kwarg(kwargs, "indent") ? kwarg(kwargs, "indent") : arg(args, 0);
    return Value(target.to_json(indent && !indent->is_none() ? int(indent->as_int()) : -1));
  }
  if (name == "string") return Value(target.str());
  if (name == "trim") return Value(strip(target.str(), arg(args, 0), true, true));
  if (name == "upper" || name == "lower") return call_method(target, name, {});
  if (name == "default" || name == "d") {
    const bool use_default =
        target.is_undefined() || (args.size() > 1 && args[1].truthy() && !target.truthy());
    return use_default ? (args.empty() ? Value("") : args[0]) : target;
  }
  if (name == "first" || name == "last") {
    if (length(target) == 0) return Value();
    return index_value(target, Value(int64_t{name == "first" ? 0 : -1}));
  }
  if (name == "join") {
    const std::string separator = args.empty() ? "" : args[0].str();
    std::string out;
    for (size_t i = 0; i < target.array().size(); ++i) {
      out += (i ? separator : "") + target.array()[i].str();
    }
    return Value(std::move(out));
  }
  if (name == "items") return call_method(target, "items", {});
  if (name == "list")
    return target.is_array() ? target : slice_value(target, nullptr, nullptr, nullptr);
  if (name == "reverse") {
    const Value step(int64_t{-1});
    return slice_value(target, nullptr, nullptr, &step);
  }
  if (name == "int")
    return Value(target.is_string() ? int64_t{std::stoll(target.as_string())} : target.as_int());
  if (name == "safe" || name == "e" || name == "escape") return target;
  fail("filter '" + name + "' is not supported");
}

bool apply_test(const std::string& name, const Value& target, const std::vector<Value>& args) {
  if (name == "defined") return !target.is_undefined();
  if (name == "undefined") return target.is_undefined();
  if (name == "none") return target.is_none();
  if (name == "true") return target.is_bool() && target.as_bool();
  if (name == "false") return target.is_bool() && !target.as_bool();
  if (name == "boolean") return target.is_bool();
  if (name == "string") return target.is_string();
  if (name == "number") return target.is_number();
  if (name == "integer") return target.is_int();
  if (name == "mapping") return target.is_object();
  if (name == "sequence" || name == "iterable") {
    return target.is_array() || target.is_string() || target.is_object();
  }
  if (name == "equalto" || name == "eq") return !args.empty() && target == args[0];
  fail("test '" + name + "' is not supported");
}

Value call_method(const Value& target, const std::string& name, const std::vector<Value>& args) {
  if (target.is_string()) {
    const std::string& s = target.as_string();
    if (name == "startswith") return Value(s.starts_with(args.at(0).as_string()));
    if (name == "endswith") return Value(s.ends_with(args.at(0).as_string()));
    if (name == "strip") return Value(strip(s, arg(args, 0), true, true));
    if (name == "lstrip") return Value(strip(s, arg(args, 0), true, false));
    if (name == "rstrip") return Value(strip(s, arg(args, 0), false, true));
    if (name == "split") return Value(split(s, arg(args, 0)));
    if (name == "upper" || name == "lower") {
      std::string out = s;
      for (char& c : out) {
        c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                              : std::tolower(static_cast<unsigned char>(c)));
      }
      return Value(std::move(out));
    }
    if (name == "replace") {
      const std::string& from = args.at(0).as_string();
      const std::string& to = args.at(1).as_string();
      if (from.empty()) return target;
      std::string out;
      size_t pos = 0;
      for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
        out += s.substr(pos, hit - pos) + to;
      }
      return Value(out + s.substr(pos));
    }
  } else if (target.is_object()) {
    if (name == "get") {
      const Value* found = target.find(args.at(0).as_string());
      return found ? *found : (args.size() > 1 ? args[1] : Value(None{}));
    }
    if (name == "items" || name == "keys" || name == "values") {
      Array out;
      for (const auto& [key, value] : target.object()) {
        if (name == "items") out.emplace_back(Array{Value(key), value});
        if (name == "keys") out.emplace_back(key);
        if (name == "values") out.push_back(value);
      }
      return Value(std::move(out));
    }
  }
  fail("method '" + name + "' of " + target.type_name() + " is not supported");
}

Value call_global(const std::string& name, const std::vector<Value>& args, const Kwargs& kwargs) {
  if (name == "namespace") {
    Object object;
    for (const auto& [key, value] : kwargs) object.emplace_back(key, value);
    return Value(std::move(object));
  }
  if (name == "raise_exception") {
    fail("template raised: " + (args.empty() ? std::string() : args[0].str()));
  }
  if (name == "range") {
    const int64_t start = args.size() > 1 ? args[0].as_int() : 0;
    const int64_t stop = args.empty() ? 0 : args[args.size() > 1 ? 1 : 0].as_int();
    const int64_t step = args.size() > 2 ? args[2].as_int() : 1;
    if (step == 0) fail("range() step cannot be zero");
    // Jinja's sandbox (transformers renders chat templates in one) refuses longer ranges.
    constexpr int64_t kMaxRange = 100000;
    const double length = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                    static_cast<double>(step));
    if (length > kMaxRange) {
      fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    Array out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
    return Value(std::move(out));
  }
  fail("function '" + name + "' is not supported");
}

}  // namespace tfm::jinja
