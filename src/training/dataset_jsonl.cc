// JSON Lines: one object per line holding text or pre-tokenized ids.
#include <limits>
#include <nlohmann/json.hpp>

#include "io/json_depth.h"
#include "tfm/error.h"
#include "training/dataset_reader.h"

namespace tfm::training {
namespace {

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

std::string type_name(const nlohmann::json& value) {
  if (value.is_null()) return "null";
  if (value.is_number_integer()) return "an integer";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return std::string("a ") + value.type_name();  // string, number (float), boolean
}

struct LineReader {
  const std::string& path;
  const JsonlOptions& options;
  int64_t line = 0;

  [[noreturn]] void fail(const std::string& problem) const {
    throw Error("dataset " + path + ":" + std::to_string(line) + ": " + problem);
  }

  nlohmann::json parse(std::string_view text) const {
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(text, json_depth_limit());
    } catch (const nlohmann::json::exception& e) {
      fail(std::string("not valid JSON (") + e.what() + ")");
    }
    if (!record.is_object()) fail("expected a JSON object, got " + type_name(record));
    return record;
  }

  const nlohmann::json& field(const nlohmann::json& record, const std::string& name) const {
    const auto it = record.find(name);
    if (it == record.end()) fail("no \"" + name + "\" field");
    return *it;
  }

  std::string text(const nlohmann::json& record) const {
    const nlohmann::json& value = field(record, options.text_field);
    if (!value.is_string()) {
      fail("\"" + options.text_field + "\" is " + type_name(value) + ", expected a string");
    }
    return value.get<std::string>();
  }

  std::vector<int32_t> ids(const nlohmann::json& record) const {
    const nlohmann::json& value = field(record, options.ids_field);
    const std::string& name = options.ids_field;
    if (!value.is_array()) fail("\"" + name + "\" is " + type_name(value) + ", expected an array");
    const int64_t limit = options.vocab_size > 0 ? options.vocab_size
                                                 : int64_t{std::numeric_limits<int32_t>::max()} + 1;
    std::vector<int32_t> out;
    out.reserve(value.size());
    for (size_t i = 0; i < value.size(); ++i) {
      const nlohmann::json& id = value[i];
      const std::string at = "\"" + name + "\"[" + std::to_string(i) + "]";
      if (!id.is_number_integer()) fail(at + " is " + type_name(id) + ", expected a token id");
      // The parser stores non-negative integers as unsigned, which may exceed int64.
      const bool in_range = id.is_number_unsigned()
                                ? id.get<uint64_t>() < static_cast<uint64_t>(limit)
                                : id.get<int64_t>() >= 0 && id.get<int64_t>() < limit;
      if (!in_range) {
        fail(at + " = " + id.dump() + " is outside " +
             (options.vocab_size > 0 ? "the vocabulary [0, " + std::to_string(limit) + ")"
                                     : std::string("the int32 token id range")));
      }
      out.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    return out;
  }
};

}  // namespace

Examples read_jsonl(const std::string& path, const JsonlOptions& options) {
  const std::string bytes = detail::read_whole_file(path);
  Examples examples;
  examples.source = path;
  LineReader reader{path, options};
  bool holds_ids = false;
  size_t start = 0;
  while (start < bytes.size()) {
    const size_t newline = bytes.find('\n', start);
    const size_t end = newline == std::string::npos ? bytes.size() : newline;
    const std::string_view line(bytes.data() + start, end - start);
    start = end + 1;
    ++reader.line;
    if (blank(line)) continue;
    const nlohmann::json record = reader.parse(line);
    if (examples.lines.empty()) {
      holds_ids = record.contains(options.ids_field);
      if (!holds_ids && !record.contains(options.text_field)) {
        reader.fail("no \"" + options.text_field + "\" or \"" + options.ids_field + "\" field");
      }
    }
    if (holds_ids) {
      examples.ids.push_back(reader.ids(record));
    } else {
      examples.texts.push_back(reader.text(record));
    }
    examples.lines.push_back(reader.line);
  }
  if (examples.lines.empty()) throw Error("dataset " + path + ": empty, no examples");
  return examples;
}

}  // namespace tfm::training
