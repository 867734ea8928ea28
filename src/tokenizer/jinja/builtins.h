// Jinja filters, tests, Python string/dict methods and global functions used by chat templates.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace tfm::jinja {

using Kwargs = std::vector<std::pair<std::string, Value>>;

Value apply_filter(const std::string& name, const Value& target, const std::vector<Value>& args,
                   const Kwargs& kwargs);
bool apply_test(const std::string& name, const Value& target, const std::vector<Value>& args);
Value call_method(const Value& target, const std::string& name, const std::vector<Value>& args);
Value call_global(const std::string& name, const std::vector<Value>& args, const Kwargs& kwargs);

// Python semantics for indexing and slicing lists and strings (negative indices count back).
Value index_value(const Value& target, const Value& index);
Value slice_value(const Value& target, const Value* start, const Value* stop, const Value* step);
bool contains(const Value& container, const Value& item);
size_t length(const Value& value);

}  // namespace tfm::jinja
