#include "tokenizer/tokenizer_json.h"

#include <simdjson.h>

#include <cstdint>

#include "io/json_depth.h"
#include "tfm/error.h"

namespace tfm::tokenizer {
namespace {

namespace od = simdjson::ondemand;

// The JSON text of a value, for nlohmann to parse (small sections only).
std::string_view raw(od::value value) {
  switch (value.type()) {
    case od::json_type::object:
      return od::object(value.get_object()).raw_json();
    case od::json_type::array:
      return od::array(value.get_array()).raw_json();
    default:
      return value.raw_json_token();
  }
}

// The vocabulary is a table by id: ids this far apart from the entries' count would only make the
// table huge (real vocabularies are dense, the largest about 2^18).
constexpr int64_t kMaxVocabId = int64_t{1} << 24;

void read_vocab(od::object vocab, const std::string& where, Vocab& out) {
  out.reserve(vocab.count_fields());
  for (auto field : vocab) {
    const std::string_view token = field.unescaped_key();
    const auto id = field.value().get_int64();
    if (id.error() || id.value_unsafe() >= kMaxVocabId) {
      throw Error(where + ": model.vocab['" + std::string(token) +
                  "'] is not an integer id below 2^24 (16777216)");
    }
    if (!out.add(token, static_cast<int32_t>(id.value_unsafe()))) {
      throw Error(where + ": model.vocab has '" + std::string(token) + "' or its id " +
                  std::to_string(id.value_unsafe()) + " twice, or a negative id");
    }
  }
}

// Appends the two parts of a merge to `text`; returns their lengths.
std::pair<size_t, size_t> read_merge(od::value merge, size_t rank, const std::string& where,
                                     std::vector<char>& text) {
  if (merge.type() == od::json_type::array) {
    size_t lengths[2], count = 0;
    for (auto part : merge.get_array()) {
      const auto s = part.get_string();
      if (s.error() || count == 2) {
        count = 3;
        break;
      }
      text.insert(text.end(), s.value_unsafe().begin(), s.value_unsafe().end());
      lengths[count++] = s.value_unsafe().size();
    }
    if (count == 2) return {lengths[0], lengths[1]};
  } else if (merge.type() == od::json_type::string) {
    // The older layout: "left right", with exactly one space.
    const std::string_view s = merge.get_string();
    const size_t space = s.find(' ');
    if (space != std::string_view::npos && s.find(' ', space + 1) == std::string_view::npos) {
      text.insert(text.end(), s.begin(), s.begin() + space);
      text.insert(text.end(), s.begin() + space + 1, s.end());
      return {space, s.size() - space - 1};
    }
  }
  throw Error(where + ": model.merges[" + std::to_string(rank) +
              "] is not \"left right\" or [\"left\", \"right\"]");
}

nlohmann::json read_model(od::object model, const std::string& where, TokenizerJson& out) {
  nlohmann::json spec = nlohmann::json::object();
  for (auto field : model) {
    const std::string key(field.unescaped_key().value());
    od::value value = field.value();
    if (key == "vocab" && value.type() == od::json_type::object) {
      read_vocab(value.get_object(), where, out.vocab);
      spec["vocab"] = true;  // present; the entries are in out.vocab
    } else if (key == "merges") {
      if (value.type() != od::json_type::array)
        throw Error(where + ": model.merges is not an array");
      std::vector<std::pair<size_t, size_t>> lengths;
      for (auto merge : value.get_array()) {
        lengths.push_back(read_merge(merge.value(), lengths.size(), where, out.merge_text));
      }
      // Views only once the text stops growing.
      const char* p = out.merge_text.data();
      for (const auto& [left, right] : lengths) {
        out.merges.emplace_back(std::string_view(p, left), std::string_view(p + left, right));
        p += left + right;
      }
    } else {
      spec[key] = nlohmann::json::parse(raw(value), json_depth_limit());
    }
  }
  return spec;
}

}  // namespace

TokenizerJson read_tokenizer_json(const std::string& path, const std::string& where) {
  simdjson::padded_string text;
  if (simdjson::padded_string::load(path).get(text)) throw Error(where + ": cannot read the file");
  TokenizerJson out;
  try {
    od::parser parser;
    od::document doc = parser.iterate(text);
    od::object top;
    if (const auto error = doc.get_object().get(top)) {
      throw Error(where + ": invalid JSON (or not an object at the top): " +
                  simdjson::error_message(error));
    }
    out.root = nlohmann::json::object();
    for (auto field : top) {
      const std::string key(field.unescaped_key().value());
      od::value value = field.value();
      if (key == "model" && value.type() == od::json_type::object) {
        out.root[key] = read_model(value.get_object(), where, out);
      } else {
        out.root[key] = nlohmann::json::parse(raw(value), json_depth_limit());
      }
    }
  } catch (const simdjson::simdjson_error& e) {
    throw Error(where + ": invalid JSON: " + e.what());
  } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number out of range
    throw Error(where + ": invalid JSON: " + e.what());
  }
  return out;
}

}  // namespace tfm::tokenizer
